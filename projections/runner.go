package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/eventstore"
)

// Runner drives projections with a Watermill router, one handler per projection.
type Runner struct {
	Pool        *pgxpool.Pool
	Projections []Projection
	Log         *logrus.Logger
	// BatchSize is the most events one message covers (default 2000); Poll is how often an
	// idle subscriber looks for new events (default 50 ms; Wake makes it look at once).
	BatchSize int
	Poll      time.Duration
	// Gather is the least time between the starts of two batches that are not full (default
	// 300 ms): under steady load a projection applies what gathered meanwhile in one batch
	// instead of chasing every commit with a transaction of its own. A full batch (the
	// projection is behind) is followed at once.
	Gather time.Duration

	subscribers []*rangeSubscriber
	router      *message.Router
}

// defaultGather is Runner.Gather's default. Against 100 ms, metered place detail served 4-27%
// more requests a second (four alternating runs: fewer projection transactions, and the
// balances and account-day upserts sum more events per row), and the balances projection's
// lag under that load peaked at 340-400 ms instead of about 150: well inside the second a
// read model may lag.
const defaultGather = 300 * time.Millisecond

// Start builds the router and runs it until ctx ends. It returns once the router runs.
func (r *Runner) Start(ctx context.Context) error {
	if r.BatchSize == 0 {
		r.BatchSize = 2000
	}
	if r.Poll == 0 {
		r.Poll = 50 * time.Millisecond
	}
	if r.Gather == 0 {
		r.Gather = defaultGather
	}
	log := r.Log
	if log == nil {
		log = logrus.New()
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logrusAdapter{log.WithField("component", "projections")})
	if err != nil {
		return err
	}
	router.AddMiddleware(middleware.Recoverer)
	for _, p := range r.Projections {
		sub := newRangeSubscriber(r.Pool, p, r.BatchSize, r.Poll)
		sub.gather = r.Gather
		sub.log = log
		r.subscribers = append(r.subscribers, sub)
		router.AddConsumerHandler(p.Name(), p.Name(), sub, handlerFor(p, sub))
	}
	r.router = router
	go func() {
		if err := router.Run(ctx); err != nil {
			log.WithError(err).Error("projection router stopped")
		}
	}()
	select {
	case <-router.Running():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handlerFor applies a message's range to p. A failure (an event p cannot apply, the database
// away, a panic) is the subscriber's to report and to space out (rangeSubscriber.failed): the
// handler nacks and returns nil, so that Watermill's router, which would log every try at
// error level, says nothing; the same range is offered again after the subscriber's backoff.
func handlerFor(p Projection, sub *rangeSubscriber) message.NoPublishHandlerFunc {
	return func(msg *message.Message) (err error) {
		var br batchRange
		if err := json.Unmarshal(msg.Payload, &br); err != nil {
			return err
		}
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
			if err != nil {
				sub.failed(msg.Context(), br, err)
				msg.Nack()
				err = nil
			}
		}()
		err = p.Handle(msg.Context(), br.From, br.To)
		if errors.Is(err, errCheckpointMoved) {
			// Another process applied this range first (every process runs the shared
			// projections): not a failure. The nack makes the subscriber re-read the
			// checkpoint; the ack the router then sends is ignored.
			msg.Nack()
			return nil
		}
		return err
	}
}

// FailedTries is, for each projection the runner drives (each member of a Group, by its
// name), how many tries of its current range failed in a row: 0 while it applies its ranges.
func (r *Runner) FailedTries() map[string]int {
	out := map[string]int{}
	for _, s := range r.subscribers {
		n := s.failedTries()
		for _, p := range Members([]Projection{s.projection}) {
			out[p.Name()] = n
		}
	}
	return out
}

// Wake tells every projection that new events were committed.
func (r *Runner) Wake() {
	for _, s := range r.subscribers {
		s.Wake()
	}
}

// Close stops the router and its subscribers.
func (r *Runner) Close() error {
	if r.router == nil {
		return nil
	}
	return r.router.Close()
}

// WaitCaughtUp waits until every projection has applied everything visible in the store
// when it was called, or ctx ends.
func WaitCaughtUp(ctx context.Context, pool *pgxpool.Pool, ps []Projection) error {
	head, err := eventstore.GlobalHead(ctx, pool)
	if err != nil {
		return err
	}
	for _, p := range ps {
		for {
			at, err := p.Checkpoint(ctx)
			if err != nil {
				return err
			}
			if !at.Less(head) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("projection %s at %v, store head %v: %w", p.Name(), at, head, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return nil
}

// batchFor is n, or less where p bounds its batches (PlaceIndex.MaxBatch).
func batchFor(p Projection, n int) int {
	if b, ok := p.(interface{ MaxBatch() int }); ok {
		return min(n, b.MaxBatch())
	}
	return n
}

// CatchUp applies to p, batch by batch in this goroutine, every event committed before it
// was called, reporting progress through report (may be nil). It returns the events counted:
// every event passed over, or for a projection that reads none of the metered requests the
// events of its types (eventstore.NextBatchOf). Events committed but not yet
// visible (a transaction elsewhere holds back the snapshot xmin) are waited for, so on
// return p has seen everything up to the head; ctx bounds the wait. Used by serve before it
// listens, and by rebuild and audit.
func CatchUp(ctx context.Context, pool *pgxpool.Pool, p Projection, batchSize int, report func(applied int, at eventstore.Position)) (int, error) {
	head, err := eventstore.GlobalHead(ctx, pool)
	if err != nil {
		return 0, err
	}
	at, err := p.Checkpoint(ctx)
	if err != nil {
		return 0, err
	}
	batchSize = batchFor(p, batchSize)
	total := 0
	if h, ok := p.(prefetchedHandler); ok && at.Less(head) {
		_, total, err := replay(ctx, pool, p.Name(), at, batchSize, h.eventTypes(), head, report, func(r readAhead) error {
			return h.handleRead(ctx, r.from, r.to, r.events)
		})
		return total, err
	}
	for at.Less(head) {
		end, n, err := eventstore.NextBatch(ctx, pool, at, batchSize)
		if err != nil {
			return total, err
		}
		if n == 0 {
			select {
			case <-ctx.Done():
				return total, fmt.Errorf("projection %s at %v waiting for %v: %w", p.Name(), at, head, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if err := p.Handle(ctx, at, end); err != nil {
			return total, err
		}
		at = end
		total += n
		if report != nil {
			report(total, at)
		}
	}
	return total, nil
}

// logrusAdapter lets Watermill log through logrus.
type logrusAdapter struct{ e *logrus.Entry }

func (l logrusAdapter) fields(f watermill.LogFields) *logrus.Entry {
	return l.e.WithFields(logrus.Fields(f))
}
func (l logrusAdapter) Error(msg string, err error, f watermill.LogFields) {
	l.fields(f).WithError(err).Error(msg)
}
func (l logrusAdapter) Info(msg string, f watermill.LogFields)  { l.fields(f).Debug(msg) }
func (l logrusAdapter) Debug(msg string, f watermill.LogFields) { l.fields(f).Trace(msg) }
func (l logrusAdapter) Trace(msg string, f watermill.LogFields) { l.fields(f).Trace(msg) }
func (l logrusAdapter) With(f watermill.LogFields) watermill.LoggerAdapter {
	return logrusAdapter{l.fields(f)}
}
