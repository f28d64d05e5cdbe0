package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/eventstore"
)

// batchRange is the payload of one Watermill message: a closed range of the global order.
type batchRange struct {
	From eventstore.Position `json:"from"`
	To   eventstore.Position `json:"to"`
}

// rangeSubscriber is a Watermill subscriber over the event store. Each message names the
// next batch of up to BatchSize visible events after the projection's checkpoint; it waits
// for the ack before offering the next one, and after a nack it re-reads the checkpoint and
// offers the range again. Reading ranges rather than single events is what lets projections
// keep up: one transaction per batch instead of one per event.
type rangeSubscriber struct {
	pool       *pgxpool.Pool
	projection Projection
	batchSize  int
	poll       time.Duration
	gather     time.Duration // least time between the starts of two batches that are not full
	wake       chan struct{}
	log        logrus.FieldLogger // nil: errors finding a range are not logged

	mu        sync.Mutex // guards the three below: the handler reports failures (failed)
	lastErrAt time.Time  // when an error was last logged: at most one line a minute
	errsSince int        // errors not logged since
	failures  int        // tries of the current range that failed in a row

	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup
}

func newRangeSubscriber(pool *pgxpool.Pool, p Projection, batchSize int, poll time.Duration) *rangeSubscriber {
	return &rangeSubscriber{pool: pool, projection: p, batchSize: batchFor(p, batchSize), poll: poll,
		wake: make(chan struct{}, 1), closed: make(chan struct{})}
}

// Wake makes the subscriber look for new events now.
func (s *rangeSubscriber) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *rangeSubscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		s.run(ctx, out)
	}()
	return out, nil
}

func (s *rangeSubscriber) run(ctx context.Context, out chan<- *message.Message) {
	var at eventstore.Position
	var next time.Time // the next batch starts no earlier
	synced := false
	for {
		if !synced {
			cp, err := s.projection.Checkpoint(ctx)
			if err != nil {
				s.logError(ctx, "reading its checkpoint", err)
				if !s.sleep(ctx, s.poll) {
					return
				}
				continue
			}
			at, synced = cp, true
		}
		if !s.pause(ctx, time.Until(next)) {
			return
		}
		started := time.Now()
		end, n, err := eventstore.NextBatchOf(ctx, s.pool, at, s.batchSize, readTypes(s.projection))
		if err != nil {
			// Logged, not only retried: behind an archive (eventstore.ErrArchived) the projection
			// stays where it is until the range is restored, and its lag is the only other sign.
			s.logError(ctx, "finding its next range", err)
		}
		if err != nil || !at.Less(end) {
			if !s.sleep(ctx, s.poll) {
				return
			}
			continue
		}
		next = time.Time{}
		if n < s.batchSize {
			// Caught up: let the next commits gather into one batch (Runner.Gather).
			next = started.Add(s.gather)
		}
		payload, _ := json.Marshal(batchRange{From: at, To: end})
		msg := message.NewMessage(watermill.NewUUID(), payload)
		msgCtx, cancel := context.WithCancel(ctx)
		msg.SetContext(msgCtx)
		select {
		case out <- msg:
		case <-ctx.Done():
			cancel()
			return
		case <-s.closed:
			cancel()
			return
		}
		select {
		case <-msg.Acked():
			at = end
			s.applied()
		case <-msg.Nacked():
			synced = false
			// A range that failed is tried again after a backoff that commits do not cut short
			// (under load they wake the subscriber at every append); one that another process
			// applied first (errCheckpointMoved) soon, from the checkpoint it left.
			wait := s.sleep
			d := 100 * time.Millisecond
			if n := s.failedTries(); n > 0 {
				wait, d = s.pause, retryAfter(n)
			}
			if !wait(ctx, d) {
				cancel()
				return
			}
		case <-ctx.Done():
			cancel()
			return
		case <-s.closed:
			cancel()
			return
		}
		cancel()
	}
}

// Backoff of a range that failed: retryFirst after the first try, doubling up to retryMost.
const (
	retryFirst = 250 * time.Millisecond
	retryMost  = 30 * time.Second
)

// retryAfter is how long the subscriber waits after the n-th failed try of a range in a row.
func retryAfter(n int) time.Duration {
	d := retryFirst
	for i := 1; i < n && d < retryMost; i++ {
		d *= 2
	}
	return min(d, retryMost)
}

// failed reports that the projection could not apply br: err is logged as the subscriber's own
// errors are (logError: once a minute while it lasts), and the range is tried again after a
// backoff (retryAfter). A try cut short because the subscriber stops is no failure.
func (s *rangeSubscriber) failed(ctx context.Context, br batchRange, err error) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	s.failures++
	s.mu.Unlock()
	s.logError(ctx, fmt.Sprintf("applying the range after %v up to %v", br.From, br.To), err)
}

// failedTries is the number of tries of the current range that failed in a row.
func (s *rangeSubscriber) failedTries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

// applied notes that a range was applied: after failures, the log says the projection moves
// again (and how many errors it did not log), and a new failure is logged at once.
func (s *rangeSubscriber) applied() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures == 0 {
		return
	}
	if s.log != nil {
		s.log.WithFields(logrus.Fields{"projection": s.projection.Name(), "failed_tries": s.failures, "errors_not_logged": s.errsSince}).
			Infof("projection %s: applying ranges again", s.projection.Name())
	}
	s.failures, s.errsSince, s.lastErrAt = 0, 0, time.Time{}
}

// logError logs err at error level, at most one line a minute whatever the errors (they
// come every poll while the cause lasts, and may differ each time), with the count of those
// not logged since the last line.
func (s *rangeSubscriber) logError(ctx context.Context, doing string, err error) {
	if s.log == nil || ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lastErrAt.IsZero() && time.Since(s.lastErrAt) < time.Minute {
		s.errsSince++
		return
	}
	s.log.WithError(err).WithFields(logrus.Fields{"projection": s.projection.Name(), "errors_not_logged": s.errsSince}).
		Errorf("projection %s: %s (retrying)", s.projection.Name(), doing)
	s.lastErrAt, s.errsSince = time.Now(), 0
}

// sleep waits d, or less if Wake is called; false when the subscriber is stopping.
func (s *rangeSubscriber) sleep(ctx context.Context, d time.Duration) bool {
	return s.wait(ctx, d, s.wake)
}

// pause waits d, deaf to Wake; false when the subscriber is stopping.
func (s *rangeSubscriber) pause(ctx context.Context, d time.Duration) bool {
	return d <= 0 || s.wait(ctx, d, nil)
}

// wait waits d or until wake delivers (a nil wake never does).
func (s *rangeSubscriber) wait(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-wake:
		return true
	case <-ctx.Done():
		return false
	case <-s.closed:
		return false
	}
}

func (s *rangeSubscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	s.wg.Wait()
	return nil
}
