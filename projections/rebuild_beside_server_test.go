package projections_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
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
	acc := commands.Accounts{Store: eventstore.New(pool), Clock: fixedClock}
	open := func(i int) {
		if _, err := acc.OpenAccount(bg, fmt.Sprint("Co ", i), fmt.Sprintf("c%d@test.example", i), eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	open(0)
	waitVisible(t, pool)
	live := projections.All(pool, nil, time.Now)[0]
	first, n, err := eventstore.NextBatch(bg, pool, eventstore.Position{}, 1000)
	if err != nil || n == 0 {
		t.Fatal(n, err)
	}
	if _, err := pool.Exec(bg, `INSERT INTO projection_checkpoints (name) VALUES ('account_days'), ('balances'), ('usage') ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	// The group's transaction stops between its locks (a stand-in for the scheduler):
	// something else holds balances' row.
	holder, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(bg)
	if _, err := holder.Exec(bg, `SELECT 1 FROM projection_checkpoints WHERE name = 'balances' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	liveDone := make(chan error, 1)
	go func() { liveDone <- live.Handle(bg, eventstore.Position{}, first) }()
	for { // the group holds account_days, has its transaction id, and waits for balances
		var w int
		if err := pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&w); err != nil {
			t.Fatal(err)
		}
		if w >= 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	open(1) // an event with a higher transaction id than the group's: the rebuild's head
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
