package readapi_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/redistest"
	"github.com/kyapi/kyapi/ratelimit"
)

// requireRateHeaders checks that the IETF fields say what the X-RateLimit-* headers say.
func requireRateHeaders(t *testing.T, r response, limit, remaining int, now time.Time) {
	t.Helper()
	h := r.Header
	if h.Get("X-RateLimit-Limit") != strconv.Itoa(limit) || h.Get("X-RateLimit-Remaining") != strconv.Itoa(remaining) {
		t.Fatalf("status %d: X-RateLimit-Limit %q Remaining %q, want %d and %d", r.Status,
			h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), limit, remaining)
	}
	reset, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	wantPolicy := `"default";q=` + strconv.Itoa(limit) + `;w=60`
	wantState := `"default";r=` + strconv.Itoa(remaining) + `;t=` + strconv.FormatInt(reset-now.Unix(), 10)
	if got := h.Get("RateLimit-Policy"); got != wantPolicy {
		t.Fatalf("RateLimit-Policy %q, want %q", got, wantPolicy)
	}
	if got := h.Get("RateLimit"); got != wantState {
		t.Fatalf("RateLimit %q, want %q", got, wantState)
	}
}

func TestEveryAuthenticatedAnswerCarriesTheIETFRateLimitFields(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	requireRateHeaders(t, s.get(key, "/api/data/towns"), 60, 59, start)          // 200
	requireRateHeaders(t, s.get(key, "/api/data/places/nowhere"), 60, 58, start) // 404
	s.clock.Advance(18 * time.Second)
	requireRateHeaders(t, s.get(key, "/api/data/places?limit=0"), 60, 57, start.Add(18*time.Second)) // 400
	for range 57 {
		s.get(key, "/api/data/towns")
	}
	r := s.get(key, "/api/data/towns")
	r.expectError(t, http.StatusTooManyRequests, "rate_limited")
	requireRateHeaders(t, r, 60, 0, start.Add(18*time.Second))
	if r.Header.Get("RateLimit") != `"default";r=0;t=42` || r.Header.Get("Retry-After") != "42" {
		t.Fatalf("429: RateLimit %q, Retry-After %q; want t=42 and 42", r.Header.Get("RateLimit"), r.Header.Get("Retry-After"))
	}
	// Unauthenticated answers carry none.
	if r := s.get("", "/api/data/towns"); r.Header.Get("RateLimit") != "" || r.Header.Get("RateLimit-Policy") != "" {
		t.Fatalf("401 with rate-limit fields: %v", r.Header)
	}
}

func TestAnAccountsOwnLimitAppliesToItsNextRequestAndNullRestoresTheDefault(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	s.get(key, "/api/data/towns") // cached with the default
	limit := int64(5)
	if err := s.accounts.SetRateLimit(ctx, account, &limit, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 5; i++ {
		r := s.get(key, "/api/data/towns")
		if r.Status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
		requireRateHeaders(t, r, 5, 5-i, start)
	}
	r := s.get(key, "/api/data/towns")
	r.expectError(t, http.StatusTooManyRequests, "rate_limited")
	requireRateHeaders(t, r, 5, 0, start)

	if err := s.accounts.SetRateLimit(ctx, account, nil, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	// Same window: 5 used of the default 60.
	r = s.get(key, "/api/data/towns")
	if r.Status != http.StatusOK {
		t.Fatalf("after null: %d %s", r.Status, r.Body)
	}
	requireRateHeaders(t, r, 60, 54, start)
}

// Two servers (processes, as far as limits go) counting in one Redis admit the limit between
// them; counting in each process admits it on each.
func TestTwoServersSharingRedisAdmitTheLimitBetweenThemAndKeepAnsweringWhenItDies(t *testing.T) {
	s := newStack(t)
	redisSrv := redistest.Start(t)
	shared := func() ratelimit.Limiter {
		// A long timeout: on a starved machine a slow answer must not count a request in the
		// process (the fallback is tested with a dead Redis, below, and in ratelimit).
		l, err := ratelimit.OpenShared(redisSrv.URL(), 30*time.Second, logrus.New())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b := s.withLimiter(shared()), s.withLimiter(shared())
	_, key := s.customer(500)

	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 90 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv := a
			if i%2 == 1 {
				srv = b
			}
			r := srv.get(key, "/api/data/towns")
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[http.StatusOK] != 60 || statuses[http.StatusTooManyRequests] != 30 {
		t.Fatalf("statuses %v over two servers sharing Redis, want 60 200s and 30 429s", statuses)
	}

	// In-process counting (the default) admits 60 on each: what sharing fixes.
	c, d := s.withLimiter(ratelimit.NewLocal()), s.withLimiter(ratelimit.NewLocal())
	_, key2 := s.customer(500)
	served := 0
	for i := range 130 {
		srv := c
		if i%2 == 1 {
			srv = d
		}
		if srv.get(key2, "/api/data/towns").Status == http.StatusOK {
			served++
		}
	}
	if served != 120 {
		t.Fatalf("two in-process limiters served %d, want 120", served)
	}

	// Redis dies: both keep answering, each counting its own.
	redisSrv.Kill()
	_, key3 := s.customer(500)
	for i := range 20 {
		srv := a
		if i%2 == 1 {
			srv = b
		}
		if r := srv.get(key3, "/api/data/towns"); r.Status != http.StatusOK {
			t.Fatalf("request %d with Redis down: %d %s", i+1, r.Status, r.Body)
		}
	}
}

// slowStore answers a Take after the clock has moved on by wait (another process's batch held
// the key's row, a slow Redis), with a window that starts when it answers, as the shared
// stores count.
type slowStore struct {
	clock interface {
		Advance(time.Duration)
		Now() time.Time
	}
	wait time.Duration
}

func (l slowStore) Take(_ context.Context, _ string, limit int, _ time.Time) ratelimit.Quota {
	l.clock.Advance(l.wait)
	if limit <= 0 {
		limit = ratelimit.DefaultPerMinute
	}
	return ratelimit.Quota{Allowed: true, Limit: limit, Remaining: limit - 1, Reset: l.clock.Now().Add(ratelimit.Window)}
}

// The seconds until the quota is whole run from when the limiter answered: a window the store
// started then has at most its 60 s left, so RateLimit's t never exceeds RateLimit-Policy's w
// (it said t=61, or more after a longer wait, on a new window's first request).
func TestRateLimitSecondsNeverExceedTheWindow(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	r := s.withLimiter(slowStore{clock: s.clock, wait: 1500 * time.Millisecond}).get(key, "/api/data/towns")
	if got := r.Header.Get("RateLimit"); got != `"default";r=59;t=60` {
		t.Fatalf("RateLimit %q after a limiter that answered 1.5 s after the request came; want t=60 (the window it started)", got)
	}
}
