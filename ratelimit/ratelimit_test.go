package ratelimit

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/internal/redistest"
	"github.com/kyapi/kyapi/internal/syncbuf"
)

var ctx = context.Background()

var t0 = time.Date(2025, 6, 15, 12, 0, 0, 0, time.UTC)

func TestTheLocalLimiterAdmitsTheLimitPerWindowThenRefusesUntilItEnds(t *testing.T) {
	l := NewLocal()
	for i := 1; i <= 5; i++ {
		q := l.Take(ctx, "k", 5, t0.Add(time.Duration(i)*time.Second))
		if !q.Allowed || q.Remaining != 5-i || !q.Reset.Equal(t0.Add(time.Second+Window)) {
			t.Fatalf("request %d: %+v", i, q)
		}
	}
	if q := l.Take(ctx, "k", 5, t0.Add(30*time.Second)); q.Allowed || q.Remaining != 0 {
		t.Fatalf("6th request: %+v, want refused with 0 remaining", q)
	}
	if q := l.Take(ctx, "other", 5, t0.Add(30*time.Second)); !q.Allowed {
		t.Fatalf("another key is refused: %+v", q)
	}
	if q := l.Take(ctx, "k", 5, t0.Add(time.Second+Window)); !q.Allowed || q.Remaining != 4 {
		t.Fatalf("first request of the next window: %+v", q)
	}
}

// A wall clock stepped back (an NTP correction, a resumed VM) keeps the window's count but
// never makes the key wait longer than a window from now, nor stops the sweep of ended windows.
func TestAClockSteppedBackKeepsTheCountButNeverAWindowLongerThanAMinute(t *testing.T) {
	l := NewLocal()
	for i := range 5 {
		l.Take(ctx, "k", 5, t0.Add(time.Duration(i)*time.Second))
	}
	back := t0.Add(-10 * time.Minute)
	q := l.Take(ctx, "k", 5, back)
	if q.Allowed || q.Reset.After(back.Add(Window)) {
		t.Fatalf("right after the step: %+v; want refused (the count is kept) with a reset at most a window away", q)
	}
	if q := l.Take(ctx, "k", 5, back.Add(Window)); !q.Allowed || q.Remaining != 4 {
		t.Fatalf("a window after the step: %+v; want a new window", q)
	}
	// Swept after the step: "idle", untouched since t0, is forgotten once its window ended on
	// the stepped clock, not only once the clock is back past t0.
	l.Take(ctx, "idle", 5, back.Add(Window))
	l.Take(ctx, "k", 5, back.Add(3*Window))
	if _, held := l.windows["idle"]; held {
		t.Fatal("an ended window is still held after the clock was stepped back")
	}
}

func TestALimitLoweredMidWindowRefusesAtOnceAndNeverReportsANegativeRemainder(t *testing.T) {
	l := NewLocal()
	for range 10 {
		l.Take(ctx, "k", 100, t0)
	}
	if q := l.Take(ctx, "k", 5, t0); q.Allowed || q.Remaining != 0 || q.Limit != 5 {
		t.Fatalf("after lowering to 5 with 10 used: %+v", q)
	}
}

func TestTheIETFHeadersSayQuotaWindowRemainderAndSecondsToReset(t *testing.T) {
	q := Quota{Allowed: true, Limit: 60, Remaining: 59, Reset: t0.Add(42 * time.Second)}
	if got := q.PolicyHeader(); got != `"default";q=60;w=60` {
		t.Errorf("RateLimit-Policy %s", got)
	}
	if got := q.Header(t0.Add(500 * time.Millisecond)); got != `"default";r=59;t=42` {
		t.Errorf("RateLimit %s", got)
	}
}

func TestRedisCountsEveryClientsRequestsAgainstOneLimit(t *testing.T) {
	srv := redistest.Start(t)
	// Three limiters with their own clients stand for three processes.
	var limiters []*Redis
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		limiters = append(limiters, NewRedis(c))
	}
	const limit, requests = 60, 300
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := limiters[i%3].Take(ctx, "key_shared", limit, time.Now())
			if err != nil {
				t.Error(err)
				return
			}
			if q.Allowed {
				allowed.Add(1)
			}
			if q.Remaining < 0 || q.Remaining > limit-1 || q.Limit != limit {
				t.Errorf("quota %+v", q)
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != limit {
		t.Fatalf("%d of %d concurrent requests from 3 clients were admitted, want exactly %d", got, requests, limit)
	}
	q, err := limiters[0].Take(ctx, "key_other", limit, time.Now())
	if err != nil || !q.Allowed || q.Remaining != limit-1 {
		t.Fatalf("another key: %+v, %v", q, err)
	}
}

func TestARedisWindowEndsAndTheNextStartsWhole(t *testing.T) {
	srv := redistest.Start(t)
	r := NewRedis(srv.Client())
	r.window = 5 * time.Second // four requests fit in it however loaded the machine
	now := time.Now()
	for i := range 3 {
		q, err := r.Take(ctx, "k", 3, now)
		if err != nil || !q.Allowed || q.Remaining != 2-i {
			t.Fatalf("request %d: %+v, %v", i+1, q, err)
		}
		// The store's window runs from when it counted, between now and its answer.
		if answered := time.Now(); q.Reset.Before(now) || q.Reset.After(answered.Add(r.window)) {
			t.Fatalf("reset %v is not within the window after %v (answered at %v)", q.Reset, now, answered)
		}
	}
	if q, _ := r.Take(ctx, "k", 3, now); q.Allowed {
		t.Fatal("4th request admitted")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		q, err := r.Take(ctx, "k", 3, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if q.Allowed {
			if q.Remaining != 2 {
				t.Fatalf("first request of the next window: %+v", q)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the window never ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A refused request is not counted: raising the limit mid-window admits exactly the difference.
func TestARaisedLimitAdmitsTheDifferenceInTheSameWindow(t *testing.T) {
	srv := redistest.Start(t)
	r := NewRedis(srv.Client())
	for range 8 {
		_, _ = r.Take(ctx, "k", 5, time.Now())
	}
	n := 0
	for range 10 {
		if q, err := r.Take(ctx, "k", 8, time.Now()); err == nil && q.Allowed {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("raising 5 to 8 after 5 admitted and 3 refused admitted %d more, want 3", n)
	}
}

func TestSharedFallsBackWhileRedisIsDownLogsOnceAndResumesByItself(t *testing.T) {
	srv := redistest.Start(t)
	lines := &syncbuf.Buffer{}
	log := logrus.New()
	log.SetOutput(lines)
	s, err := OpenShared(srv.URL(), testRedisTimeout, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.probeEvery = 50 * time.Millisecond
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}

	// Up: counted in Redis, where another process's requests count too.
	other := NewRedis(srv.Client())
	for range 4 {
		_, _ = other.Take(ctx, "k", 5, time.Now())
	}
	if q := s.Take(ctx, "k", 5, time.Now()); !q.Allowed || q.Remaining != 0 {
		t.Fatalf("5th request counted in Redis: %+v", q)
	}

	srv.Kill()
	for i := range 200 {
		q := s.Take(ctx, "down", 1000, time.Now())
		if !q.Allowed || q.Remaining != 1000-1-i {
			t.Fatalf("request %d while Redis is down: %+v, want counted in the process", i+1, q)
		}
	}
	if !s.Down() {
		t.Fatal("the limiter does not know Redis is down")
	}
	if n := lines.Count("Redis unavailable"); n != 1 {
		t.Fatalf("%d outage lines for 200 requests, want 1:\n%s", n, lines.String())
	}

	srv.Restart()
	deadline := time.Now().Add(30 * time.Second)
	for s.Down() {
		s.Take(ctx, "probe", 1000, time.Now())
		if time.Now().After(deadline) {
			t.Fatal("the limiter never went back to Redis")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := lines.Count("Redis answers again"); n != 1 {
		t.Fatalf("%d recovery lines, want 1:\n%s", n, lines.String())
	}
	// Back: shared counting again (the restarted Redis is empty).
	for range 2 {
		_, _ = other.Take(ctx, "after", 3, time.Now())
	}
	if q := s.Take(ctx, "after", 3, time.Now()); !q.Allowed || q.Remaining != 0 {
		t.Fatalf("after recovery: %+v, want the 3rd shared request", q)
	}
	if q := s.Take(ctx, "after", 3, time.Now()); q.Allowed {
		t.Fatal("after recovery the 4th shared request was admitted")
	}
	if n := lines.Count("Redis unavailable"); n != 1 {
		t.Fatalf("%d outage lines, want still 1", n)
	}
}

func TestAServerStartingWhileRedisIsDownServesFromTheProcess(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	lines := &syncbuf.Buffer{}
	log := logrus.New()
	log.SetOutput(lines)
	s, err := OpenShared(srv.URL(), testRedisTimeout, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(ctx); err == nil {
		t.Fatal("Check found a killed Redis answering")
	}
	if q := s.Take(ctx, "k", 2, time.Now()); !q.Allowed || q.Remaining != 1 {
		t.Fatalf("first request: %+v", q)
	}
	if n := lines.Count("Redis unavailable"); n != 1 {
		t.Fatalf("%d outage lines, want 1", n)
	}
}

func TestABadRedisURLIsAnErrorNamingTheVariable(t *testing.T) {
	if _, err := OpenShared("http://nope", 0, nil); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Fatalf("error %v", err)
	}
}
