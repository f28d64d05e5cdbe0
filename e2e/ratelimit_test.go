package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/internal/redistest"
)

// burst sends n requests of key for path, spread round-robin over the processes, all at once,
// and counts the answers by status.
func burst(t *testing.T, procs []*service, key, path string, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := procs[i%len(procs)].tryRead(path, key)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			statuses[r.Status]++
		}()
	}
	wg.Wait()
	return statuses
}

// Two and three `kyapi serve` processes sharing one Redis and one database admit each key's
// limit between them: the 61st request in the minute is refused on whichever process gets
// it. An account's own limit, set through one process, applies on the others without a
// restart.
func TestServeProcessesSharingRedisAdmitEachKeysLimitBetweenThem(t *testing.T) {
	t.Parallel()
	redisSrv := redistest.Start(t)
	processesAdmitEachKeysLimitBetweenThem(t, map[string]string{"REDIS_URL": redisSrv.URL()}, "Redis")
}

// The same without Redis (REDIS_URL unset, as decisions.md configures serve): the processes
// count in the database they share, so every rule holds across them with PostgreSQL alone.
func TestServeProcessesWithoutRedisAdmitEachKeysLimitBetweenThem(t *testing.T) {
	t.Parallel()
	processesAdmitEachKeysLimitBetweenThem(t, map[string]string{}, "PostgreSQL")
}

func processesAdmitEachKeysLimitBetweenThem(t *testing.T, env map[string]string, store string) {
	dbURL := pgtest.NewDatabase(t)
	importCatalog(t, dbURL)
	token := randomToken("admin-")
	// REDIS_TIMEOUT (a call to the store) long: on a starved machine a slow answer would
	// otherwise count a request in its process, and the processes would admit more than the
	// limit between them.
	env["RATE_LIMIT_PER_MINUTE"], env["REDIS_TIMEOUT"] = "60", "30s"
	procs := []*service{
		startServe(t, serveConfig{Name: "A", DatabaseURL: dbURL, AdminToken: token, Env: env}),
		startServe(t, serveConfig{Name: "B", DatabaseURL: dbURL, AdminToken: token, Env: env}),
		startServe(t, serveConfig{Name: "C", DatabaseURL: dbURL, AdminToken: token, Env: env}),
	}
	for _, p := range procs {
		if !strings.Contains(p.Output(), "rate limiter: shared in "+store) {
			t.Errorf("%s did not log that it counts in %s:\n%s", p.cfg.Name, store, p.Output())
		}
	}

	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d processes", n), func(t *testing.T) {
			_, key := procs[0].openAccount(fmt.Sprintf("Shared%d", n), 500)
			st := burst(t, procs[:n], key.APIKey, "/api/data/towns", 60)
			if st[http.StatusOK] != 60 {
				t.Fatalf("first 60 requests over %d processes: %v, want 60 200s", n, st)
			}
			for _, p := range procs[:n] {
				r := p.read("/api/data/towns", key.APIKey)
				if r.Status != http.StatusTooManyRequests || r.errorCode() != "rate_limited" {
					t.Errorf("request past the limit on %s: %d %s, want 429 rate_limited", p.cfg.Name, r.Status, r.Body)
				}
				if r.Header.Get("RateLimit") == "" || !strings.HasPrefix(r.Header.Get("RateLimit"), `"default";r=0;t=`) ||
					r.Header.Get("RateLimit-Policy") != `"default";q=60;w=60` || r.Header.Get("Retry-After") == "" {
					t.Errorf("429 headers on %s: %v", p.cfg.Name, r.Header)
				}
			}
			// A burst larger than the limit admits exactly the limit.
			_, key2 := procs[0].openAccount(fmt.Sprintf("Burst%d", n), 500)
			st = burst(t, procs[:n], key2.APIKey, "/api/data/towns", 150)
			if st[http.StatusOK] != 60 || st[http.StatusTooManyRequests] != 90 {
				t.Fatalf("150 concurrent requests over %d processes: %v, want 60 200s and 90 429s", n, st)
			}
		})
	}

	t.Run("an account's own limit reaches every process", func(t *testing.T) {
		accountID, key := procs[0].openAccount("OwnLimit", 500)
		procs[1].readOK("/api/data/towns", key.APIKey) // B and C have the key cached
		procs[2].readOK("/api/data/towns", key.APIKey)
		procs[0].admin(http.MethodPut, "/admin/accounts/"+accountID+"/rate-limit", map[string]any{"requests_per_minute": 5}, http.StatusOK)
		// The change reaches the others by notification, in milliseconds: no restart, no expiry.
		for _, p := range procs[1:] {
			eventually(t, recoveryWait, p.cfg.Name+" applies the account's limit", func() error {
				r := p.read("/api/data/places/nowhere", key.APIKey)
				if got := r.Header.Get("X-RateLimit-Limit"); got != "5" {
					return fmt.Errorf("X-RateLimit-Limit %q", got)
				}
				return nil
			})
		}
		// A new key of the account starts its own window under the account's limit.
		fresh := procs[0].issueKey(accountID)
		st := burst(t, procs, fresh.APIKey, "/api/data/towns", 8)
		if st[http.StatusOK] != 5 || st[http.StatusTooManyRequests] != 3 {
			t.Fatalf("8 requests over 3 processes with the account's limit of 5: %v, want 5 200s and 3 429s", st)
		}
		var view struct {
			Data struct {
				RateLimitPerMinute *int `json:"rate_limit_per_minute"`
			} `json:"data"`
		}
		procs[2].admin(http.MethodGet, "/admin/accounts/"+accountID, nil, http.StatusOK).decode(t, &view)
		if view.Data.RateLimitPerMinute == nil || *view.Data.RateLimitPerMinute != 5 {
			t.Fatalf("account view rate_limit_per_minute %v, want 5", view.Data.RateLimitPerMinute)
		}
	})
	requireAuditClean(t, dbURL)
}

// Redis killed under load: every request is still answered (no 500, no 503), each process
// logs the outage once; Redis back: each logs the recovery once, by itself, and counting is
// shared again.
func TestRedisKilledMidLoadKeepsAnsweringAndSharedCountingResumesWhenItIsBack(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	places := importCatalog(t, dbURL)
	redisSrv := redistest.Start(t)
	token := randomToken("admin-")
	// REDIS_TIMEOUT long, so that only the kill (refused at once) starts an outage, never a slow
	// answer on a starved machine: each process must log exactly one.
	env := map[string]string{"REDIS_URL": redisSrv.URL(), "RATE_LIMIT_PER_MINUTE": "100000", "REDIS_TIMEOUT": "30s"}
	a := startServe(t, serveConfig{Name: "A", DatabaseURL: dbURL, AdminToken: token, Env: env})
	b := startServe(t, serveConfig{Name: "B", DatabaseURL: dbURL, AdminToken: token, Env: env})
	procs := []*service{a, b}
	_, key := a.openAccount("Load", 2500)

	var (
		stop     atomic.Bool
		served   atomic.Int64
		mu       sync.Mutex
		failures []string
		wg       sync.WaitGroup
	)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				p := procs[(g+i)%2]
				r, err := p.tryRead("/api/data/places/"+places[(g*31+i)%len(places)].ID, key.APIKey)
				switch {
				case err != nil:
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %v", p.cfg.Name, err))
					mu.Unlock()
				case r.Status != http.StatusOK:
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %d %s", p.cfg.Name, r.Status, r.Body))
					mu.Unlock()
				default:
					served.Add(1)
				}
			}
		}()
	}
	waitServed := func(more int64) {
		target := served.Load() + more
		eventually(t, recoveryWait, "the load goes on", func() error {
			if n := served.Load(); n < target {
				return fmt.Errorf("%d served, waiting for %d", n, target)
			}
			return nil
		})
	}
	waitServed(50)
	redisSrv.Kill()
	waitServed(200)
	for _, p := range procs {
		eventually(t, recoveryWait, p.cfg.Name+" logs the outage", func() error {
			if n := strings.Count(p.Output(), "Redis unavailable"); n != 1 {
				return fmt.Errorf("%d outage lines", n)
			}
			return nil
		})
	}
	redisSrv.Restart()
	for _, p := range procs {
		eventually(t, recoveryWait, p.cfg.Name+" goes back to Redis by itself", func() error {
			if n := strings.Count(p.Output(), "Redis answers again"); n != 1 {
				return fmt.Errorf("%d recovery lines", n)
			}
			return nil
		})
	}
	waitServed(50)
	stop.Store(true)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed while Redis died and came back (of %d served), first: %s", len(failures), served.Load(), failures[0])
	}
	for _, p := range procs {
		out := p.Output()
		if n := strings.Count(out, "Redis unavailable"); n != 1 {
			t.Errorf("%s logged the outage %d times, want once", p.cfg.Name, n)
		}
		if n := strings.Count(out, "Redis answers again"); n != 1 {
			t.Errorf("%s logged the recovery %d times, want once", p.cfg.Name, n)
		}
		if strings.Contains(out, "failed to dial") {
			t.Errorf("%s logged the Redis client's own dial errors, not just the one outage line", p.cfg.Name)
		}
	}

	// Shared again: an account limited to 10 gets 10 between the two processes.
	accountID, key2 := a.openAccount("After", 500)
	a.admin(http.MethodPut, "/admin/accounts/"+accountID+"/rate-limit", map[string]any{"requests_per_minute": 10}, http.StatusOK)
	st := burst(t, procs, key2.APIKey, "/api/data/towns", 30)
	if st[http.StatusOK] != 10 || st[http.StatusTooManyRequests] != 20 {
		t.Fatalf("after Redis came back, 30 requests over two processes with limit 10: %v, want 10 200s and 20 429s", st)
	}
}
