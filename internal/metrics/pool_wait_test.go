package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"

	"github.com/kyapi/kyapi/internal/metrics"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// docs/operations.md, "Metrics": kyapi_db_pool_acquire_wait_seconds_total is the "time waited"
// (HELP: "Time spent waiting to acquire a connection."), beside kyapi_db_pool_acquire_waits_total,
// "those that waited". It is fed pgxpool's AcquireDuration, the time of every acquire, so it
// grows with acquires that found an idle connection and never waited: an alert on waiting
// fires on plain traffic. pgxpool has the figure the docs describe: EmptyAcquireWaitTime.
func TestPoolWaitSecondsGrowOnlyWhenAnAcquireWaited(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	// Warm the pool: one idle connection every later acquire finds at once.
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	m := metrics.New(metrics.Source{Pool: pool})
	scrape := func() (waits, seconds float64) {
		w := httptest.NewRecorder()
		m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(w.Body)
		get := func(name string) float64 {
			mm := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
			if mm == nil {
				t.Fatalf("no %s", name)
			}
			v, _ := strconv.ParseFloat(string(mm[1]), 64)
			return v
		}
		return get("kyapi_db_pool_acquire_waits_total"), get("kyapi_db_pool_acquire_wait_seconds_total")
	}
	waits0, secs0 := scrape()
	for range 20000 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	waits1, secs1 := scrape()
	t.Logf("acquires that waited: %v -> %v; seconds waited: %v -> %v; pgxpool EmptyAcquireWaitTime %v",
		waits0, waits1, secs0, secs1, pool.Stat().EmptyAcquireWaitTime())
	if waits1 == waits0 && secs1 > secs0 {
		t.Fatalf("no acquire waited (kyapi_db_pool_acquire_waits_total stayed %v), yet kyapi_db_pool_acquire_wait_seconds_total grew by %gs",
			waits0, secs1-secs0)
	}
}
