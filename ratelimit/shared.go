package ratelimit

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/sirupsen/logrus"
)

// Shared counts in a store every process shares — Redis (REDIS_URL), or else the database
// (Postgres) — and, while it cannot be reached, in the process (Local): the read API keeps
// answering through an outage, each process enforcing the limit on its own requests
// (availability over strictness, docs/api.md). Each answer from the store is copied to the
// process, so counting there continues the window in progress. It logs the outage once when it
// starts and once when it ends; while the store is down one request at a time, at most once
// per probeEvery, tries it again, so counting returns to it by itself.
type Shared struct {
	remote remote
	name   string // of the store, in the log: Redis, PostgreSQL
	local  *Local
	log    *logrus.Logger
	// callTimeout bounds one call to the store; past it the request is counted locally.
	callTimeout time.Duration
	probeEvery  time.Duration

	mu        sync.Mutex
	down      bool
	nextProbe time.Time
	// turns counts the changes between up and down. A call's answer moves the state only if
	// none happened since the call started: a reply to a call sent before Redis died that
	// arrives after another call's failure is no recovery, and a failure of a call sent before
	// a recovery is no new outage (each outage is logged once, and its end once).
	turns uint64
}

// Settings of the Redis client: short timeouts, so an unreachable Redis costs a request at
// most about a second (DefaultRedisTimeout, REDIS_TIMEOUT), and no retries: a retried script
// whose reply was lost would count the request twice. A failed call is counted in the
// process, and the probe tries Redis again.
const (
	DefaultRedisTimeout = time.Second
	redisProbeEvery     = time.Second
)

// OpenShared returns a Shared limiter over the Redis at redisURL (redis://, rediss://), each
// call to which (dial, command, wait for a pooled connection) is bounded by timeout (0:
// DefaultRedisTimeout). It does not wait for Redis: call Check to learn whether it answers.
func OpenShared(redisURL string, timeout time.Duration, log *logrus.Logger) (*Shared, error) {
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	if timeout <= 0 {
		timeout = DefaultRedisTimeout
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = timeout, timeout, timeout
	opts.PoolTimeout = timeout
	// The call's context deadline (timeout, set in Take and Check) bounds the socket reads and
	// writes too: without it go-redis waits ReadTimeout afresh after a slow dial or pool wait,
	// and one call could take twice the timeout README promises as its bound.
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1   // none (0 means go-redis's default of 3)
	opts.DialerRetries = 1 // the probe once a second is the retry
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if log == nil {
		log = logrus.StandardLogger()
	}
	// go-redis writes its own lines to stderr (a failed dial, on every probe): they go to the
	// service's log at debug level, so an outage is the one warning below, not a line a second.
	redis.SetLogger(debugLog{log})
	s := NewShared(redis.NewClient(opts), log)
	s.callTimeout = timeout
	return s, nil
}

// debugLog passes go-redis's own log lines to logrus at debug level.
type debugLog struct{ log *logrus.Logger }

func (d debugLog) Printf(_ context.Context, format string, v ...any) {
	d.log.WithField("component", "go-redis").Debugf(format, v...)
}

// remote is the store a Shared limiter counts in.
type remote interface {
	// Take counts one request of key; an error means the store did not answer and nothing is known.
	// The store times windows by its own clock, not by now: its Reset runs from when its
	// answer came, never before the window it counted in ends.
	Take(ctx context.Context, key string, limit int, now time.Time) (Quota, error)
	Ping(ctx context.Context) error
	Describe() string
	Close() error
}

// NewShared counts in the Redis that client reaches, and in the process while it is down.
func NewShared(client *redis.Client, log *logrus.Logger) *Shared {
	return newShared(NewRedis(client), "Redis", log)
}

// NewSharedInDatabase counts in the database (Postgres), each call bounded by timeout (0:
// DefaultRedisTimeout), and in the process while it does not answer. Close stops its worker;
// the pool is the caller's.
func NewSharedInDatabase(pool *pgxpool.Pool, timeout time.Duration, log *logrus.Logger) *Shared {
	p := NewPostgres(pool)
	if timeout > 0 {
		p.timeout = timeout
	}
	s := newShared(p, "PostgreSQL", log)
	s.callTimeout = p.timeout
	return s
}

func newShared(r remote, name string, log *logrus.Logger) *Shared {
	if log == nil {
		log = logrus.StandardLogger()
	}
	return &Shared{remote: r, name: name, local: NewLocal(), log: log,
		callTimeout: DefaultRedisTimeout, probeEvery: redisProbeEvery}
}

// Store names the store the limiter counts in: Redis or PostgreSQL.
func (s *Shared) Store() string { return s.name }

// Describe names where the limiter counts, for the start-up log (a Redis address without
// credentials).
func (s *Shared) Describe() string { return s.remote.Describe() }

// Describe is the Redis address without credentials: a URL of the form REDIS_URL takes.
func (r *Redis) Describe() string {
	o := r.client.Options()
	if o.Network == "unix" {
		u := url.URL{Scheme: "unix", Path: o.Addr, RawQuery: fmt.Sprintf("db=%d", o.DB)}
		return u.String()
	}
	u := url.URL{Scheme: "redis", Host: o.Addr, Path: fmt.Sprintf("/%d", o.DB)}
	if o.TLSConfig != nil {
		u.Scheme = "rediss"
	}
	return u.String()
}

// Ping checks that Redis answers.
func (r *Redis) Ping(ctx context.Context) error { return r.client.Ping(ctx).Err() }

// Close closes the Redis client.
func (r *Redis) Close() error { return r.client.Close() }

// Check pings the store; a failure starts the outage (logged once) as a failed request would.
func (s *Shared) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	turn := s.turn()
	err := s.remote.Ping(ctx)
	if err != nil {
		s.failed(err, turn)
	} else {
		s.answered(turn)
	}
	return err
}

// Close closes the store's client (stops its worker).
func (s *Shared) Close() error { return s.remote.Close() }

// Take counts one request in the store, or in the process when it does not answer.
func (s *Shared) Take(ctx context.Context, key string, limit int, now time.Time) Quota {
	if ok, turn := s.tryRemote(); ok {
		rctx, cancel := context.WithTimeout(ctx, s.callTimeout)
		q, err := s.remote.Take(rctx, key, limit, now)
		cancel()
		switch {
		case err == nil:
			s.answered(turn)
			s.local.follow(key, q, now)
			return q
		case ctx.Err() != nil:
			// The client went away: no news about the store.
		default:
			s.failed(err, turn)
		}
	}
	return s.local.Take(ctx, key, limit, now)
}

// follow makes key's window in the process the one Redis reported in q, so that counting in
// the process when Redis stops answering continues that window rather than starting the key
// a new one (docs/api.md, "Rate limit"). The count is limit − remaining: exact, except after a
// limit lowered mid-window, where it is the limit and still refuses the key. A key already
// held is updated in place, so a request costs no allocation.
//
// The process keeps its own count when it is the larger and its window did not start before
// Redis's (a second's leeway for the two clocks): those are requests it admitted itself while
// Redis did not answer, inside Redis's window, which Redis never saw. Overwritten, each return
// of a Redis that keeps dropping out would give the key its quota in the process again, and
// one process could admit many times the limit in a minute, not twice it.
func (l *Local) follow(key string, q Quota, now time.Time) {
	start, used := q.Reset.Add(-Window), q.Limit-q.Remaining
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	if w := l.windows[key]; w != nil {
		if start.Sub(w.start) < time.Second && w.used > used {
			used = w.used
		}
		w.start, w.used = start, used
		return
	}
	l.windows[key] = &keyWindow{start: start, used: used}
}

// tryRemote reports whether this request asks the store — always while it is up; while it is
// down, one request per probeEvery — and the turn it asks in.
func (s *Shared) tryRemote() (bool, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		return true, s.turns
	}
	now := time.Now()
	if now.Before(s.nextProbe) {
		return false, s.turns
	}
	s.nextProbe = now.Add(s.probeEvery)
	return true, s.turns
}

// turn is the number of changes between up and down so far.
func (s *Shared) turn() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turns
}

// failed records a call of turn that Redis did not answer.
func (s *Shared) failed(err error, turn uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextProbe = time.Now().Add(s.probeEvery)
	if s.down || turn != s.turns {
		return
	}
	s.down = true
	s.turns++
	s.log.WithError(err).Warnf("rate limiter: %s unavailable; each process counts its own requests until it answers again", s.name)
}

// answered records a call of turn that Redis answered.
func (s *Shared) answered(turn uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down || turn != s.turns {
		return
	}
	s.down = false
	s.turns++
	s.log.Infof("rate limiter: %s answers again; requests are counted in %s", s.name, s.name)
}

// Down reports whether the limiter is counting in the process because the store did not answer.
func (s *Shared) Down() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}
