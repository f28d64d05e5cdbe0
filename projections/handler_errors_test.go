package projections_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/internal/syncbuf"
	"github.com/kyapi/kyapi/projections"
)

// appendPoison appends to an account stream a RequestCharged whose payload no decoder
// reads: the account projections fail on it every time they are handed it.
func appendPoison(t *testing.T, store *eventstore.Store) {
	t.Helper()
	err := store.WithTx(bg, func(tx pgx.Tx) error {
		heads, err := eventstore.OpenHeads(bg, tx, true, domain.AccountStream("poison"))
		if err != nil {
			return err
		}
		_, err = eventstore.Append(bg, tx, heads[domain.AccountStream("poison")], fixedClock(),
			eventstore.NewEvent{Type: domain.EventRequestCharged, Payload: json.RawMessage(`{"k":"not a number"}`)},
			eventstore.NewEvent{Type: domain.EventRequestCharged, Payload: json.RawMessage(`{"k":"not a number"}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A projection that fails on an event (a payload it cannot decode, a bug) fails on it at every
// try, for as long as nobody repairs it: its error is logged once a minute, with the count of
// those not logged, as the subscriber's own errors are, not once per try (ten lines a second,
// more under load).
func TestAProjectionFailingOnAnEventLogsOnceAMinuteNotAtEveryTry(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := eventstore.New(pool)
	appendPoison(t, store)
	var out syncbuf.Buffer
	log := logrus.New()
	log.SetOutput(&out)
	balances := &countingProjection{Projection: projections.SQL{Pool: pool, Applier: projections.Balances{}}}
	runner := &projections.Runner{Pool: pool, Projections: []projections.Projection{balances}, Log: log}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	// A try is counted (ranges) as it starts, its failure (FailedTries) after it ends: the
	// fifth try starts only once the fourth's failure was counted and its backoff waited.
	for balances.ranges.Load() < 5 {
		time.Sleep(10 * time.Millisecond)
	}
	logged := out.String()
	if n := strings.Count(logged, "level=error"); n != 1 {
		t.Fatalf("%d tries of a failing range logged %d error lines, want 1:\n%s", balances.ranges.Load(), n, logged)
	}
	if !strings.Contains(logged, "projection=balances") || !strings.Contains(logged, "RequestCharged payload") {
		t.Fatalf("the error line does not name the projection and its error:\n%s", logged)
	}
	// What /metrics shows (kyapi_projection_failed_tries).
	if n := runner.FailedTries()["balances"]; n < 4 {
		t.Fatalf("the runner reports %d failed tries of balances in a row, want at least 4", n)
	}
}

// After a failure a projection waits before it tries again, and the commits that wake it
// meanwhile (every append of a loaded server does) do not cut the wait short: they would
// have it read and fail on the same range as fast as the charges commit.
func TestAFailingProjectionIsNotRetriedAtEveryWake(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := eventstore.New(pool)
	appendPoison(t, store)
	log := logrus.New()
	log.SetOutput(&syncbuf.Buffer{})
	balances := &countingProjection{Projection: projections.SQL{Pool: pool, Applier: projections.Balances{}}}
	// Ranges of one event: full, so no gathering spaces the tries either.
	runner := &projections.Runner{Pool: pool, Projections: []projections.Projection{balances}, Log: log, BatchSize: 1}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	for balances.ranges.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	var wakes atomic.Int64
	for range 20 {
		runner.Wake()
		wakes.Add(1)
		time.Sleep(5 * time.Millisecond)
	}
	if n := balances.ranges.Load(); n > 2 {
		t.Fatalf("a failing range was tried %d times through %d wakes: each wake retried it", n, wakes.Load())
	}
}
