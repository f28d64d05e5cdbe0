package projections

import (
	"context"
	"fmt"
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
			events, err := eventstore.ReadRangeWhole(ctx, pool, streamNames(pool), at, end, types...)
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

// replay applies the ranges after from, read ahead (prefetch), up to until (the zero
// Position: the end of the store), reporting progress through report (may be nil). It returns
// where it stopped and the events counted (eventstore.NextBatchOf); stopping short of until is
// an error.
func replay(ctx context.Context, pool *pgxpool.Pool, name string, from eventstore.Position, batchSize int, types []string,
	until eventstore.Position, report func(int, eventstore.Position), apply func(readAhead) error) (eventstore.Position, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	at, total := from, 0
	for r := range prefetch(ctx, pool, from, batchSize, types, until) {
		if r.err != nil {
			return at, total, r.err
		}
		if err := apply(r); err != nil {
			return at, total, err
		}
		at, total = r.to, total+r.n
		if report != nil {
			report(total, at)
		}
	}
	if until == (eventstore.Position{}) {
		return at, total, context.Cause(ctx) // prefetch stops quietly when ctx ends
	}
	if at.Less(until) {
		return at, total, fmt.Errorf("projection %s at %v waiting for %v: %w", name, at, until, context.Cause(ctx))
	}
	return at, total, nil
}
