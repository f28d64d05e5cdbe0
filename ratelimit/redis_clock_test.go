package ratelimit

import (
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/redistest"
)

// Redis keeps a key's expiry as an instant of its own wall clock, so a Redis host whose clock
// is stepped back (an NTP correction, a resumed VM) by an hour finds every counter an hour
// further from its end: PTTL says an hour and a minute. The window in progress must keep its
// count but end a window from now at the latest, as the process (Local) and the database
// (kyapi_rate_take) do, and as docs/api.md says ("RateLimit's t is never more than w"); it made
// the key wait the whole step, told Retry-After 3660.
func TestARedisWhoseClockWasSteppedBackNeverMakesAKeyWaitLongerThanAWindow(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	r := NewRedis(c)
	// What a Redis whose clock went back an hour holds for a key that used its 5 requests in a
	// window begun a moment before the step.
	if err := c.Set(ctx, keyPrefix+"k", 5, time.Hour+Window).Err(); err != nil {
		t.Fatal(err)
	}
	q, err := r.Take(ctx, "k", 5, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if q.Allowed || q.Remaining != 0 {
		t.Fatalf("right after the step: %+v; want refused (the window keeps its count)", q)
	}
	if wait := q.RetryAfter(time.Now()); wait > int64(Window/time.Second) {
		t.Fatalf("Retry-After %d s after Redis's clock was stepped back an hour; want at most a window (%d s)", wait, int64(Window/time.Second))
	}
	ttl, err := c.PTTL(ctx, keyPrefix+"k").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl > Window {
		t.Fatalf("the counter still expires in %v; want within a window", ttl)
	}
	// An admitted request of such a window is told the same.
	if err := c.Set(ctx, keyPrefix+"j", 1, time.Hour+Window).Err(); err != nil {
		t.Fatal(err)
	}
	q, err = r.Take(ctx, "j", 5, time.Now())
	if err != nil || !q.Allowed || q.Remaining != 3 {
		t.Fatalf("another key in a stepped-back window: %+v, %v; want admitted, 3 remaining", q, err)
	}
	if wait := q.RetryAfter(time.Now()); wait > int64(Window/time.Second) {
		t.Fatalf("RateLimit t=%d; want at most w=%d", wait, int64(Window/time.Second))
	}
}
