package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// The sweep deletes ended windows skipping the rows a batch holds: locking them in the table's
// order, against a batch's key order, deadlocked (found by review):
// a batch reviving two stale keys while another process sweeps deadlocks, and PostgreSQL
// aborts one of them (when it is the batch, every request of it is counted in the process and
// the limiter is taken for down). Key "m" only holds the batch between "a" and "b" so that
// the interleaving is deterministic.
func TestTheSweepNeverDeadlocksWithABatch(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// b before a in the heap; both windows ended two hours ago.
	if _, err := pool.Exec(ctx, `INSERT INTO rate_windows VALUES ('b', now() - interval '2 hours', 5), ('a', now() - interval '2 hours', 5), ('m', now(), 1)`); err != nil {
		t.Fatal(err)
	}
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, `SELECT FROM rate_windows WHERE key_id = 'm' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	batch := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, `SELECT * FROM kyapi_rate_take('{a,m,b}', '{60,60,60}', 60000)`)
		batch <- err
	}()
	time.Sleep(300 * time.Millisecond) // the batch holds a, waits for m
	sweep := make(chan error, 1)
	go func() {
		p := &Postgres{pool: pool, window: Window, timeout: 30 * time.Second}
		p.sweep()
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM rate_windows WHERE key_id = 'b'`).Scan(&n)
		if err == nil && n != 0 {
			err = fmt.Errorf("the ended window of b, which no batch held, is still there")
		}
		sweep <- err
	}()
	time.Sleep(300 * time.Millisecond) // the sweep deleted b, waits for a
	if err := blocker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-batch; err != nil {
		t.Fatalf("batch: %v", err)
	}
	if err := <-sweep; err != nil {
		t.Fatalf("sweep: %v", err)
	}
}

// Each sweep deletes the ended windows a chunk at a time, within its call's bound
// (REDIS_TIMEOUT), and the next sweep is due after the next batch while whole chunks come
// back. One statement for all of them outgrew that bound past a few hundred thousand ended
// windows (300,000 took 1 s here, a million 3.5 s): it was cancelled every ten minutes,
// deleted nothing, and rate_windows kept a row for every key ever used, growing with every
// new key (a rotation is one), while each cancelled sweep held the worker's takes for its
// whole bound.
func TestEndedWindowsAreSweptWhateverTheirNumber(t *testing.T) {
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const ended, live = 1_000_000, 10
	if _, err := pool.Exec(ctx, `INSERT INTO rate_windows SELECT 'ended-' || g, now() - interval '2 hours', 5
		FROM generate_series(1, $1::int) g`, ended); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO rate_windows SELECT 'live-' || g, now(), 1 FROM generate_series(1, $1::int) g`, live); err != nil {
		t.Fatal(err)
	}
	p := &Postgres{pool: pool, window: Window, timeout: DefaultRedisTimeout}
	left := func(prefix string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM rate_windows WHERE key_id LIKE $1 || '%'`, prefix).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The worker sweeps after each batch: as many batches as it takes, and a few more.
	for range 200 {
		p.sweep()
	}
	if n := left("ended-"); n != 0 {
		t.Fatalf("%d of %d windows that ended two hours ago are still in rate_windows after 200 sweeps", n, ended)
	}
	if n := left("live-"); n != live {
		t.Fatalf("%d of %d live windows left, want all", n, live)
	}
}
