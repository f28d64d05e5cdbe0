package ratelimit

import (
	"context"
	"sync"
	"time"
)

// Local counts requests in the process: exact for one process, and each process of several
// counts only its own requests.
type Local struct {
	mu        sync.Mutex
	windows   map[string]*keyWindow
	lastSweep time.Time
}

type keyWindow struct {
	start time.Time
	used  int
}

// NewLocal returns an empty in-process limiter.
func NewLocal() *Local {
	return &Local{windows: map[string]*keyWindow{}}
}

// Take counts one request of key at now, unless the key's quota is used up. A limit of 0 or
// less is DefaultPerMinute.
func (l *Local) Take(_ context.Context, key string, limit int, now time.Time) Quota {
	limit = normalize(limit)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	w := l.windows[key]
	switch {
	case w == nil || !now.Before(w.start.Add(Window)):
		w = &keyWindow{start: now}
		l.windows[key] = w
	case now.Before(w.start):
		// The wall clock was stepped back (an NTP correction, a resumed VM): the window in
		// progress keeps its count and ends a Window from now at the latest, not the whole
		// step later.
		w.start = now
	}
	q := Quota{Limit: limit, Reset: w.start.Add(Window)}
	if w.used < limit {
		w.used++
		q.Allowed = true
	}
	q.Remaining = max(limit-w.used, 0)
	return q
}

// sweep forgets windows that have ended, at most once per window, so idle keys do not
// accumulate; also at once after the clock was stepped back past the last sweep, which would
// otherwise stop sweeps until the clock caught up.
func (l *Local) sweep(now time.Time) {
	if d := now.Sub(l.lastSweep); d >= 0 && d < Window {
		return
	}
	l.lastSweep = now
	for k, w := range l.windows {
		if !now.Before(w.start.Add(Window)) {
			delete(l.windows, k)
		}
	}
}
