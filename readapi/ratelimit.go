package readapi

import (
	"sync"
	"time"
)

// DefaultRateLimitPerMinute is the per-key request cap when the server is given none.
const DefaultRateLimitPerMinute = 60

// rateWindow is how long one quota lasts.
const rateWindow = time.Minute

// rateLimiter caps requests per key with a fixed window that starts at the key's first
// request. It lives in the process: each server process counts its own requests.
type rateLimiter struct {
	limit int

	mu        sync.Mutex
	windows   map[string]*keyWindow
	lastSweep time.Time
}

type keyWindow struct {
	start time.Time
	used  int
}

// quota is the rate-limit state a response reports.
type quota struct {
	Allowed   bool
	Limit     int
	Remaining int
	Reset     time.Time // when the quota is whole again
}

func newRateLimiter(limit int) *rateLimiter {
	if limit <= 0 {
		limit = DefaultRateLimitPerMinute
	}
	return &rateLimiter{limit: limit, windows: map[string]*keyWindow{}}
}

// take counts one request of key at now, unless the key's quota is used up.
func (l *rateLimiter) take(key string, now time.Time) quota {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	w := l.windows[key]
	if w == nil || !now.Before(w.start.Add(rateWindow)) {
		w = &keyWindow{start: now}
		l.windows[key] = w
	}
	q := quota{Limit: l.limit, Reset: w.start.Add(rateWindow)}
	if w.used < l.limit {
		w.used++
		q.Allowed = true
	}
	q.Remaining = l.limit - w.used
	return q
}

// sweep forgets windows that have ended, at most once per window, so idle keys do not
// accumulate.
func (l *rateLimiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < rateWindow {
		return
	}
	l.lastSweep = now
	for k, w := range l.windows {
		if !now.Before(w.start.Add(rateWindow)) {
			delete(l.windows, k)
		}
	}
}

// ResetUnix is the reset instant in Unix seconds, rounded up so that a client waiting
// until then finds the quota whole.
func (q quota) ResetUnix() int64 {
	s := q.Reset.Unix()
	if q.Reset.Nanosecond() > 0 {
		s++
	}
	return s
}

// RetryAfter is the whole seconds to wait from now, at least 1.
func (q quota) RetryAfter(now time.Time) int64 {
	d := q.Reset.Sub(now)
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return max(s, 1)
}
