package projections_test

import (
	"testing"
	"time"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

// A usage rebuild run beside a serving process ends. The process's group locks its members'
// checkpoint rows in name order (account_days, balances, usage) in a transaction that took
// its id at the first lock; an event committed after that is the rebuild's head. Had the
// rebuild locked usage's row and then waited for its head to become visible, it would wait
// for the group's transaction, and the group for usage's row: a standoff PostgreSQL's
// deadlock detector cannot see. The rebuild waits for the head before it locks.
func TestAUsageRebuildBesideAServingProcessEnds(t *testing.T) {
	pool := pgtest.NewPool(t)
	openAccounts(t, pool, 0, 1)
	waitVisible(t, pool)
	live := projections.All(pool, nil, time.Now)[0]
	first, n, err := eventstore.NextBatch(bg, pool, eventstore.Position{}, 1000)
	if err != nil || n == 0 {
		t.Fatal(n, err)
	}
	// The group's transaction stops between its locks (a stand-in for the scheduler):
	// something else holds balances' row.
	holder := holdCheckpoint(t, pool, "balances")
	liveDone := make(chan error, 1)
	go func() { liveDone <- live.Handle(bg, eventstore.Position{}, first) }()
	waitLockWaiters(t, pool, 1) // the group holds account_days, has its transaction id, and waits for balances
	openAccounts(t, pool, 1, 1) // an event with a higher transaction id than the group's: the rebuild's head
	rbDone := make(chan error, 1)
	go func() {
		_, err := projections.SQL{Pool: pool, Applier: projections.Usage{}}.Rebuild(bg, 1000, nil)
		rbDone <- err
	}()
	// Let the rebuild get as far as it goes while the group is held (on the old code: its
	// lock on usage's row), then let the group go on. Both must end.
	time.Sleep(300 * time.Millisecond)
	if err := holder.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-liveDone; err != nil {
		t.Fatalf("the serving process's group: %v", err)
	}
	if err := <-rbDone; err != nil {
		t.Fatalf("the rebuild: %v", err)
	}
}
