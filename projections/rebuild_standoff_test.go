package projections_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

// poolWithRoom is a pool on a fresh database with room for every session these tests hold open.
func poolWithRoom(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// waitUntil polls cond until it is true or ctx ends (then fails the test).
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// A usage rebuild beside a serving process ends (docs/operations.md: servers running during a
// rebuild "serve partial read models until it ends"). Were the rebuild's head read after it
// waited for the transactions running (SettledPosition), a serving group that took its
// transaction id meanwhile, and an event committed after that, would make that head invisible
// until the group's transaction ended; the rebuild would lock usage's checkpoint row, the group
// queue for that row, and the rebuild wait for its head for ever. The standoff is found from
// the locks, not from a timer.
func TestAUsageRebuildBesideAGroupThatStartedDuringItsWaitEnds(t *testing.T) {
	pool := poolWithRoom(t)
	openAccounts(t, pool, 0, 1)
	waitVisible(t, pool)
	live := projections.All(pool, nil, time.Now)[0] // the serving process's account Group
	first, n, err := eventstore.NextBatch(bg, pool, eventstore.Position{}, 1000)
	if err != nil || n == 0 {
		t.Fatal(n, err)
	}
	if _, err := pool.Exec(bg, `INSERT INTO projection_checkpoints (name) VALUES ('account_days'), ('balances'), ('usage') ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	guard, stopGuard := context.WithTimeout(bg, 2*time.Minute) // only so a broken setup cannot hang
	defer stopGuard()

	// A transaction running when the rebuild starts (under load: a charge in flight).
	older, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback(bg)
	if _, err := older.Exec(bg, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}

	rbCtx, cancelRebuild := context.WithCancel(bg)
	defer cancelRebuild()
	rbDone := make(chan error, 1)
	go func() {
		_, err := projections.SQL{Pool: pool, Applier: projections.Usage{}}.Rebuild(rbCtx, 1000, nil)
		rbDone <- err
	}()
	// The rebuild has taken its fresh transaction id and waits for `older` (SettledPosition).
	// The pattern is a parameter: written into the query, it would match this very poll, whose
	// text an idle connection of the pool still shows once the poll ran on another, and the
	// wait would end before the rebuild took its id (then the group's id is the older one, and
	// the rebuild waits for the group, which waits for holder: the test hangs until guard).
	waitUntil(t, guard, "the rebuild to wait in SettledPosition", func() bool {
		var k int
		_ = pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE $1`,
			"%pg_snapshot_xmin(pg_current_snapshot()) > $1::text::xid8%").Scan(&k)
		return k > 0
	})

	// Another process's group holds balances' row; this process's group takes account_days
	// (and its transaction id) and queues for balances.
	holder := holdCheckpoint(t, pool, "balances")
	liveDone := make(chan error, 1)
	go func() { liveDone <- live.Handle(bg, eventstore.Position{}, first) }()
	waitLockWaiters(t, pool, 1)
	var groupXid string
	if err := pool.QueryRow(bg, `SELECT backend_xid::text FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND query LIKE '%projection_checkpoints%'`).Scan(&groupXid); err != nil {
		t.Fatal(err)
	}
	// A charge (here: an account opened) commits after the group took its id.
	openAccounts(t, pool, 1, 1)
	head, err := eventstore.GlobalHead(bg, pool)
	if err != nil {
		t.Fatal(err)
	}

	// The transaction that was running ends: the rebuild settles, reads its head, locks usage.
	if err := older.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	rebuildPid := 0
	waitUntil(t, guard, "the rebuild to lock usage's read model or end", func() bool {
		select {
		case err := <-rbDone:
			rbDone <- err
			return true
		default:
		}
		_ = pool.QueryRow(bg, `SELECT coalesce(max(l.pid), 0) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE c.relname = 'rm_usage_daily' AND l.mode = 'AccessExclusiveLock' AND l.granted
			  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&rebuildPid)
		return rebuildPid != 0
	})
	// The other process's group commits: this one takes balances and queues for usage.
	if err := holder.Rollback(bg); err != nil {
		t.Fatal(err)
	}

	// The standoff: the group waits for the rebuild's lock while the rebuild's read-ahead keeps
	// asking for events after the ones it has (eventstore.NextBatch finding nothing visible):
	// its head has a transaction id above the group's, which cannot become visible before the
	// group ends. A rebuild whose head is visible reads it in one NextBatch and commits.
	standoff := false
	polls := map[string]bool{}
	waitUntil(t, guard, "the rebuild to end or a standoff", func() bool {
		select {
		case err := <-rbDone:
			rbDone <- err
			return true
		default:
		}
		if rebuildPid == 0 {
			return false
		}
		var blocked bool
		var pollsNow []string
		if err := pool.QueryRow(bg, `SELECT
				EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND backend_xid::text = $1
					AND $2::int = ANY (pg_blocking_pids(pid))),
				coalesce((SELECT array_agg(pid::text || '@' || query_start::text) FROM pg_stat_activity
					WHERE datname = current_database() AND query LIKE $3), '{}')`, // a parameter, not to match this poll
			groupXid, fmt.Sprint(rebuildPid), "%count(*) OVER ()%").Scan(&blocked, &pollsNow); err != nil {
			t.Fatal(err)
		}
		if !blocked {
			clear(polls)
			return false
		}
		for _, p := range pollsNow {
			polls[p] = true
		}
		standoff = len(polls) >= 4 && head.TxID > 0
		return standoff
	})
	if standoff {
		t.Errorf("standoff: the usage rebuild (pid %d) holds usage's checkpoint row and waits for its head %v to become visible; "+
			"the serving group (xid %s, below the head's) waits for that row, so the head can never become visible and the rebuild never ends",
			rebuildPid, head, groupXid)
		cancelRebuild()
	}
	if err := <-rbDone; err != nil && !standoff {
		t.Fatalf("the rebuild: %v", err)
	}
	if err := <-liveDone; err != nil {
		t.Fatalf("the serving group: %v", err)
	}
}
