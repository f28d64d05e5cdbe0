package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres counts requests in the database every `kyapi serve` process shares (the
// rate_windows table, migration 0029): together the processes admit at most the limit per key
// per window, as with Redis, and with PostgreSQL alone. Requests are counted in batches (group
// commit): one worker sends every request waiting as one call of kyapi_rate_take, so a busy
// server pays one round trip per batch, not per request; while a batch is out, the next one
// gathers. The window is timed by the database's clock, so processes with skewed clocks agree.
type Postgres struct {
	pool    *pgxpool.Pool
	window  time.Duration // Window; tests shorten it
	timeout time.Duration // bounds one call (DefaultRedisTimeout)

	mu      sync.Mutex
	wake    *sync.Cond
	queue   []*pgTake
	closed  bool
	stopped chan struct{}

	lastSweep time.Time // the worker's alone
}

// pgTake is one request waiting to be counted, and once counted its answer.
type pgTake struct {
	key   string
	limit int
	q     Quota
	err   error
	done  chan struct{}
}

// maxTakeBatch bounds the requests of one call.
const maxTakeBatch = 1024

// sweepEvery is how often the worker deletes windows that ended long ago, so that keys no
// longer used do not stay in the table.
const sweepEvery = 10 * time.Minute

// NewPostgres counts in the database pool reaches, whose schema is migrated. Close stops it.
func NewPostgres(pool *pgxpool.Pool) *Postgres {
	p := &Postgres{pool: pool, window: Window, timeout: DefaultRedisTimeout, stopped: make(chan struct{})}
	p.wake = sync.NewCond(&p.mu)
	go p.work()
	return p
}

// Take counts one request of key; an error means the database did not answer in time (ctx)
// and nothing is known. A limit of 0 or less is DefaultPerMinute.
func (p *Postgres) Take(ctx context.Context, key string, limit int, _ time.Time) (Quota, error) {
	t := &pgTake{key: key, limit: normalize(limit), done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return Quota{}, fmt.Errorf("rate limiter: closed")
	}
	p.queue = append(p.queue, t)
	p.wake.Signal()
	p.mu.Unlock()
	select {
	case <-t.done:
		return t.q, t.err
	case <-ctx.Done():
		// Its batch may still count it: counted or not, the caller counts it in the process.
		return Quota{}, ctx.Err()
	}
}

// Ping checks that the database answers.
func (p *Postgres) Ping(ctx context.Context) error { return p.pool.Ping(ctx) }

// Describe names where the limiter counts, for the start-up log.
func (p *Postgres) Describe() string { return "PostgreSQL (rate_windows)" }

// Close stops the worker once the requests waiting are counted. The pool is the caller's.
func (p *Postgres) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.wake.Broadcast()
	}
	p.mu.Unlock()
	<-p.stopped
	return nil
}

func (p *Postgres) work() {
	defer close(p.stopped)
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.closed {
			p.wake.Wait()
		}
		if len(p.queue) == 0 {
			p.mu.Unlock()
			return
		}
		n := min(len(p.queue), maxTakeBatch)
		batch := slices.Clone(p.queue[:n])
		p.queue = slices.Delete(p.queue, 0, n)
		p.mu.Unlock()
		p.take(batch)
		p.sweep()
	}
}

// take counts batch in one call. Keys go in sorted (stable: a key's requests keep their order),
// so that batches of several processes lock the rows of the keys they share in one order.
func (p *Postgres) take(batch []*pgTake) {
	slices.SortStableFunc(batch, func(a, b *pgTake) int { return cmp.Compare(a.key, b.key) })
	keys, limits := make([]string, len(batch)), make([]int32, len(batch))
	for i, t := range batch {
		keys[i], limits[i] = t.key, int32(min(t.limit, 1<<31-1))
	}
	// Bounded as a call to Redis is: past it the requests are counted in the process.
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	rows, err := p.pool.Query(ctx, `SELECT allowed, used, reset_ms FROM kyapi_rate_take($1, $2, $3)`,
		keys, limits, p.window.Milliseconds())
	// Each window's end is reset_ms after the database counted, which may be long after the
	// request came (a row another process's batch held, a queue): counted from when the
	// answer is here, the reset told is never before the window's real end.
	answered := time.Now()
	i := 0
	if err == nil {
		for rows.Next() {
			var allowed bool
			var used int32
			var resetMs int64
			if err = rows.Scan(&allowed, &used, &resetMs); err != nil {
				break
			}
			if i < len(batch) {
				t := batch[i]
				t.q = Quota{Allowed: allowed, Limit: t.limit, Remaining: max(t.limit-int(used), 0),
					Reset: answered.Add(time.Duration(resetMs) * time.Millisecond)}
			}
			i++
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err == nil && i != len(batch) {
			err = fmt.Errorf("rate limiter: %d answers for %d requests", i, len(batch))
		}
	}
	for _, t := range batch {
		if err != nil {
			t.q, t.err = Quota{}, err
		}
		close(t.done)
	}
}

// sweepChunk bounds the windows one sweep deletes, so that its statement ends well within its
// bound (timeout) whatever the table holds: one statement for all of them, past a few hundred
// thousand, was cancelled at every sweep and deleted nothing, ever again.
const sweepChunk = 10_000

// sweep deletes, at most once per sweepEvery, the windows that ended over an hour ago, up to
// sweepChunk of them; while it finds a whole chunk, the next sweep is due at once (after the
// next batch), until they are all gone.
func (p *Postgres) sweep() {
	if time.Since(p.lastSweep) < sweepEvery {
		return
	}
	p.lastSweep = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	// Rows a batch holds are skipped (the next sweep deletes them): locking them in the
	// table's order here, against a batch's key order, could deadlock with it.
	tag, err := p.pool.Exec(ctx, `DELETE FROM rate_windows WHERE key_id IN (SELECT key_id FROM rate_windows
		WHERE window_start < clock_timestamp() - $1::bigint * interval '1 millisecond' LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		(p.window + time.Hour).Milliseconds(), sweepChunk)
	if err == nil && tag.RowsAffected() >= sweepChunk {
		p.lastSweep = time.Time{}
	}
}
