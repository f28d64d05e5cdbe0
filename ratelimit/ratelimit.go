// Package ratelimit counts each API key's requests per minute: in the process (Local), in one
// Redis shared by every process (Redis), or in Redis with the process as its fallback while
// Redis cannot be reached (Shared). Every limiter uses the same rule, a fixed window of one
// minute that starts at the key's first request, so what a client sees does not depend on
// which one answers (docs/api.md, "Rate limit").
package ratelimit

import (
	"context"
	"strconv"
	"time"
)

// DefaultPerMinute is the per-key request cap when the server is given none.
const DefaultPerMinute = 60

// Window is how long one quota lasts.
const Window = time.Minute

// Limiter counts one request of a key against limit requests per Window.
type Limiter interface {
	Take(ctx context.Context, key string, limit int, now time.Time) Quota
}

// Quota is the rate-limit state a response reports.
type Quota struct {
	Allowed   bool
	Limit     int
	Remaining int
	Reset     time.Time // when the quota is whole again
}

// ResetUnix is the reset instant in Unix seconds, rounded up so that a client waiting
// until then finds the quota whole.
func (q Quota) ResetUnix() int64 {
	s := q.Reset.Unix()
	if q.Reset.Nanosecond() > 0 {
		s++
	}
	return s
}

// RetryAfter is the whole seconds to wait from now, at least 1.
func (q Quota) RetryAfter(now time.Time) int64 {
	d := q.Reset.Sub(now)
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return max(s, 1)
}

// PolicyHeader is the RateLimit-Policy field (IETF draft-ietf-httpapi-ratelimit-headers):
// the quota q per window w seconds.
func (q Quota) PolicyHeader() string {
	return `"default";q=` + strconv.Itoa(q.Limit) + `;w=` + strconv.Itoa(int(Window/time.Second))
}

// Header is the RateLimit field: r requests remaining, t seconds until the quota is whole.
func (q Quota) Header(now time.Time) string {
	return `"default";r=` + strconv.Itoa(q.Remaining) + `;t=` + strconv.FormatInt(q.RetryAfter(now), 10)
}

func normalize(limit int) int {
	if limit <= 0 {
		return DefaultPerMinute
	}
	return limit
}
