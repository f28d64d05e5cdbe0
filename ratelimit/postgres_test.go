package ratelimit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/internal/syncbuf"
)

// newPostgres is a database limiter over its own pool of the database at url: one process.
func newPostgres(t *testing.T, url string) *Postgres {
	t.Helper()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPostgres(pool)
	p.timeout = 30 * time.Second // a starved machine must not turn a slow answer into a failure
	t.Cleanup(func() {
		_ = p.Close()
		pool.Close()
	})
	return p
}

// Without Redis the processes count in the database they share: three limiters with their own
// pools, standing for three processes, admit exactly the limit of one key between them, however
// their requests interleave and batch; another key has its own.
func TestTheDatabaseCountsEveryProcesssRequestsAgainstOneLimit(t *testing.T) {
	url := pgtest.NewDatabase(t)
	limiters := []*Postgres{newPostgres(t, url), newPostgres(t, url), newPostgres(t, url)}
	const limit, requests = 60, 300
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			key := "key_shared"
			if i%10 == 0 {
				key = fmt.Sprintf("key_%d", i) // other keys in the same batches, sorted in among it
			}
			q, err := limiters[i%3].Take(ctx, key, limit, time.Now())
			if err != nil {
				t.Error(err)
				return
			}
			if key == "key_shared" && q.Allowed {
				allowed.Add(1)
			}
			if q.Remaining < 0 || q.Remaining > limit-1 || q.Limit != limit || q.Reset.Before(time.Now().Add(-time.Second)) {
				t.Errorf("quota %+v", q)
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != limit {
		t.Fatalf("%d of %d concurrent requests of one key from 3 processes were admitted, want exactly %d", got, requests*9/10, limit)
	}
	q, err := limiters[0].Take(ctx, "key_other", limit, time.Now())
	if err != nil || !q.Allowed || q.Remaining != limit-1 {
		t.Fatalf("another key: %+v, %v", q, err)
	}
}

// A window starts at the key's first request and lasts the window; the next starts whole. A
// refused request is not counted, so a limit raised mid-window admits exactly the difference,
// and one lowered refuses at once, with nothing remaining rather than a negative count.
func TestADatabaseWindowEndsWholeAndCountsOnlyWhatItAdmits(t *testing.T) {
	p := newPostgres(t, pgtest.NewDatabase(t))
	p.window = 2 * time.Second
	now := time.Now()
	for i := range 3 {
		q, err := p.Take(ctx, "k", 3, now)
		if err != nil || !q.Allowed || q.Remaining != 2-i {
			t.Fatalf("request %d: %+v, %v", i+1, q, err)
		}
		// The store's window runs from when it counted, between now and its answer.
		if answered := time.Now(); q.Reset.Before(now) || q.Reset.After(answered.Add(p.window)) {
			t.Fatalf("reset %v is not within the window after %v (answered at %v)", q.Reset, now, answered)
		}
	}
	for range 2 {
		if q, err := p.Take(ctx, "k", 3, now); err != nil || q.Allowed || q.Remaining != 0 {
			t.Fatalf("past the limit: %+v, %v", q, err)
		}
	}
	if q, err := p.Take(ctx, "k", 2, now); err != nil || q.Allowed || q.Remaining != 0 {
		t.Fatalf("limit lowered to 2 after 3 admitted: %+v, %v", q, err)
	}
	n := 0
	for range 4 {
		if q, err := p.Take(ctx, "k", 5, now); err == nil && q.Allowed {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("raising 3 to 5 after 3 admitted and 3 refused admitted %d more, want 2", n)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		q, err := p.Take(ctx, "k", 5, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if q.Allowed {
			if q.Remaining != 4 {
				t.Fatalf("first request of the next window: %+v", q)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the window never ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A database that does not answer: the shared limiter counts in the process and says so once,
// as it does for Redis.
func TestSharedInTheDatabaseCountsInTheProcessWhileTheDatabaseIsUnreachable(t *testing.T) {
	pool, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var logs syncbuf.Buffer
	log := logrus.New()
	log.SetOutput(&logs)
	s := NewSharedInDatabase(pool, 200*time.Millisecond, log)
	defer s.Close()
	for i := range 5 {
		if q := s.Take(ctx, "k", 3, t0); q.Allowed != (i < 3) {
			t.Fatalf("request %d counted in the process: %+v", i+1, q)
		}
	}
	if !s.Down() || logs.Count("rate limiter: PostgreSQL unavailable") != 1 {
		t.Fatalf("down %v, log:\n%s", s.Down(), logs.String())
	}
}

// X-RateLimit-Reset is when the quota is whole again: a request that waited for its key's row
// (another process's batch holding it) before the database counted it must not be told a
// reset earlier than the window's real end, which runs from when it was counted.
func TestADatabaseResetIsNeverBeforeTheWindowEnds(t *testing.T) {
	url := pgtest.NewDatabase(t)
	p := newPostgres(t, url)
	p.window = 3 * time.Second
	other, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Exec(ctx, `INSERT INTO rate_windows VALUES ('k', now() - interval '1 hour', 0)`); err != nil {
		t.Fatal(err)
	}
	tx, err := other.Begin(ctx) // another process's batch holding the row
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM rate_windows WHERE key_id = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(1500 * time.Millisecond); _ = tx.Commit(ctx) }()
	q, err := p.Take(ctx, "k", 1, time.Now())
	if err != nil || !q.Allowed {
		t.Fatalf("first request: %+v %v", q, err)
	}
	var end time.Time
	if err := other.QueryRow(ctx, `SELECT window_start + interval '3 seconds' FROM rate_windows WHERE key_id = 'k'`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	if reset := time.Unix(q.ResetUnix(), 0); reset.Before(end) {
		t.Fatalf("X-RateLimit-Reset %v is before the window's end %v", reset, end)
	}
}
