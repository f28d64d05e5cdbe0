package readapi_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/redistest"
	"github.com/kyapi/kyapi/ratelimit"
)

// docs/api.md, "Rate limit": while Redis is down a key gets "up to N × its limit over N
// processes, never more". One server (N = 1) whose Redis dies after a key used its limit
// goes on refusing the key for the rest of that minute (the test clock does not move).
func TestAServerWhoseRedisDiesServesAKeyNoMoreThanItsLimitThatMinute(t *testing.T) {
	s := newStack(t)
	redisSrv := redistest.Start(t)
	log := logrus.New()
	log.SetOutput(io.Discard)
	shared, err := ratelimit.OpenShared(redisSrv.URL(), 0, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Close() })
	if err := shared.Check(ctx); err != nil {
		t.Fatal(err)
	}
	one := s.withLimiter(shared)
	account, key := s.customer(500)
	limit := int64(3)
	if err := s.accounts.SetRateLimit(ctx, account, &limit, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	served := 0
	for range 4 {
		if one.get(key, "/api/data/towns").Status == http.StatusOK {
			served++
		}
	}
	if served != 3 {
		t.Fatalf("setup: %d of 4 served through Redis, want 3", served)
	}
	redisSrv.Kill()
	for range 4 {
		if r := one.get(key, "/api/data/towns"); r.Status == http.StatusOK {
			served++
		} else if r.Status != http.StatusTooManyRequests {
			t.Fatalf("with Redis down: %d %s, want 429", r.Status, r.Body)
		}
	}
	if served > 3 {
		t.Fatalf("one server served %d requests of one key in one minute with its limit at 3 (3 before Redis died, %d after); want at most N × 3 = 3",
			served, served-3)
	}
}
