package projections_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

// waitVisible waits until every committed event is visible to the gap-free reader (other
// tests share the cluster and may hold back its xmin for a moment).
func waitVisible(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	total := catalogCount(t, pool, `SELECT count(*) FROM events`)
	for {
		evs, err := eventstore.ReadAll(bg, pool, eventstore.Position{}, 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == total {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A second process catching up (serve before it listens, or kyapi audit) while the first
// process's router applies the same shared projection does not fail: several serve processes
// share one database, and the audit's catch-up advances the read models as a running
// projection would (docs/operations.md). The router's ranges (2,000 events) and a catch-up's (5,000)
// differ, so a range the other process applied first ends inside the catch-up's range.
func TestACatchUpRacingAnotherProcesssRouterEndsWhereItShould(t *testing.T) {
	for _, tc := range []struct {
		name    string
		catchUp func(pool *pgxpool.Pool) projections.Projection
		lock    string
	}{
		// serve: every process runs the account read models as one Group
		{"serve start", func(pool *pgxpool.Pool) projections.Projection {
			return projections.All(pool, nil, time.Now)[0]
		}, "account_days"},
		// kyapi audit: catchUpShared runs each applier alone
		{"audit", func(pool *pgxpool.Pool) projections.Projection {
			return projections.SQL{Pool: pool, Applier: projections.Balances{}}
		}, "balances"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := pgtest.NewPool(t)
			openAccounts(t, pool, 0, 4)
			waitVisible(t, pool)
			live := projections.All(pool, nil, time.Now)[0] // the other process's router: a Group
			mid, n, err := eventstore.NextBatch(bg, pool, eventstore.Position{}, 2)
			if err != nil || n != 2 {
				t.Fatal(n, err)
			}
			// Hold the checkpoint row so that both appliers queue behind it in a known order.
			holder := holdCheckpoint(t, pool, tc.lock)
			liveDone := make(chan error, 1)
			go func() { liveDone <- live.Handle(bg, eventstore.Position{}, mid) }()
			waitLockWaiters(t, pool, 1)
			cuDone := make(chan error, 1)
			go func() {
				_, err := projections.CatchUp(bg, pool, tc.catchUp(pool), 5000, nil)
				cuDone <- err
			}()
			waitLockWaiters(t, pool, 2)
			if err := holder.Rollback(bg); err != nil {
				t.Fatal(err)
			}
			if err := <-liveDone; err != nil {
				t.Fatalf("the router's range: %v", err)
			}
			if err := <-cuDone; err != nil {
				t.Fatalf("the catch-up failed: %v", err)
			}
			// Whoever applied what, every event counted once: the read models are a rebuild's.
			if _, err := projections.CatchUp(bg, pool, live, 5000, nil); err != nil {
				t.Fatal(err)
			}
			raced := dump(t, pool)
			for _, a := range projections.SQLAppliers(time.Now) {
				sql := projections.SQL{Pool: pool, Applier: a}
				if err := sql.Reset(bg); err != nil {
					t.Fatal(err)
				}
				if _, err := projections.CatchUp(bg, pool, sql, 1000, nil); err != nil {
					t.Fatal(err)
				}
			}
			if rebuilt := dump(t, pool); len(rebuilt["rm_balances"]) != 4 || !reflect.DeepEqual(raced, rebuilt) {
				t.Fatalf("read models after the race differ from a rebuild:\nraced:   %v\nrebuilt: %v", raced, rebuilt)
			}
		})
	}
}

// openAccounts opens accounts number from to from+n-1.
func openAccounts(t *testing.T, pool *pgxpool.Pool, from, n int) {
	t.Helper()
	acc := commands.Accounts{Store: eventstore.New(pool), Clock: fixedClock}
	for i := from; i < from+n; i++ {
		if _, err := acc.OpenAccount(bg, fmt.Sprint("Co ", i), fmt.Sprintf("c%d@test.example", i), eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
}

// holdCheckpoint locks the checkpoint row of the account projection named in a transaction of
// its own (rolled back at the end of the test at the latest), creating the account
// projections' rows first.
func holdCheckpoint(t *testing.T, pool *pgxpool.Pool, name string) pgx.Tx {
	t.Helper()
	if _, err := pool.Exec(bg, `INSERT INTO projection_checkpoints (name) VALUES ('account_days'), ('balances'), ('usage') ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(bg) })
	if _, err := tx.Exec(bg, `SELECT 1 FROM projection_checkpoints WHERE name = $1 FOR UPDATE`, name); err != nil {
		t.Fatal(err)
	}
	return tx
}

// waitLockWaiters waits until at least n sessions of the test's database wait for a lock.
func waitLockWaiters(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	for {
		var w int
		if err := pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&w); err != nil {
			t.Fatal(err)
		}
		if w >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
