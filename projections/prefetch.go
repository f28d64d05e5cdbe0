package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/eventstore"
)

// readAhead is one range of the global order read ahead of its projection: the events in
// (from, to] of the types the projection reads, and n as eventstore.NextBatchOf counts them
// (every event of the range, or for a sparse reader the events of its types).
type readAhead struct {
	from, to eventstore.Position
	n        int
	events   []eventstore.Event
	err      error
}

// prefetchedHandler is a projection that can apply a range whose events were read ahead,
// outside its own transaction. Events are immutable and a range from NextBatch is closed, so
// reading them earlier reads the same events.
type prefetchedHandler interface {
	// eventTypes are the events the projection reads (none: every type).
	eventTypes() []string
	handleRead(ctx context.Context, from, to eventstore.Position, events []eventstore.Event) error
}

// readTypes are the event types p reads (none: every type). A projection that reads none of
// the metered requests finds its ranges without passing over them (eventstore.NextBatchOf).
func readTypes(p Projection) []string {
	if h, ok := p.(prefetchedHandler); ok {
		return h.eventTypes()
	}
	return nil
}

// prefetch reads the ranges after from, batchSize positions at most each, one range ahead of
// whoever receives them: while a projection applies a range (its database writes, an index's
// analysis), the next one is read on another connection, so a catch-up or a rebuild keeps
// both the database and this process busy instead of taking turns. It stops after a range
// ending at or past until (the zero Position: after the first empty read, the end of the
// store), on the first error (sent as the last range), or when ctx ends. A range whose events
// are committed but not yet visible is waited for, as CatchUp does.
func prefetch(ctx context.Context, pool *pgxpool.Pool, from eventstore.Position, batchSize int, types []string, until eventstore.Position) <-chan readAhead {
	out := make(chan readAhead, 1)
	go func() {
		defer close(out)
		send := func(r readAhead) bool {
			select {
			case out <- r:
				return r.err == nil
			case <-ctx.Done():
				return false
			}
		}
		at := from
		for {
			end, n, err := eventstore.NextBatchOf(ctx, pool, at, batchSize, types)
			if err != nil {
				send(readAhead{err: err})
				return
			}
			if !at.Less(end) {
				if until == (eventstore.Position{}) {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			events, err := eventstore.ReadRangeOf(ctx, pool, streamNames(pool), at, end, types...)
			if !send(readAhead{from: at, to: end, n: n, events: events, err: err}) {
				return
			}
			if until != (eventstore.Position{}) && !end.Less(until) {
				return
			}
			at = end
		}
	}()
	return out
}
