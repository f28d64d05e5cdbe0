package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// answered is a 200 the client received during the load.
type answered struct {
	path        string
	requestID   string
	creditsUsed int64
	count       *int
}

func TestSIGKILLMidLoadLosesNoCharge(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	places := importCatalog(t, dbURL)
	cfg := serveConfig{
		Name: "crashing", DatabaseURL: dbURL, DataDir: t.TempDir(), AdminToken: randomToken("admin-"),
		// The load must not be cut short by the per-key rate limit.
		Env: map[string]string{"RATE_LIMIT_PER_MINUTE": "1000000"},
	}
	s := startServe(t, cfg)
	accountID, key := s.openAccount("Crash", 2500) // 5,000 credits

	// 8 clients, 36 requests each: details of distinct places, and every fourth a page
	// of the Louisville list (76 places, so every page has rows).
	const (
		clients   = 8
		perClient = 36
		killAfter = 100 // responses
	)
	var (
		mu        sync.Mutex
		ok        []answered
		other     = map[int]int{} // non-200 statuses seen
		transport int             // requests that failed without an answer
		responses atomic.Int64
		killOnce  sync.Once
		wg        sync.WaitGroup
	)
	client := &http.Client{Timeout: clientTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				path := "/api/data/places/" + places[g*perClient+i].ID
				if i%4 == 3 {
					path = fmt.Sprintf("/api/data/places?town=louisville&limit=5&offset=%d", ((g*perClient+i)%14)*5)
				}
				req, _ := http.NewRequest(http.MethodGet, s.ReadURL+path, nil)
				req.Header.Set("Authorization", "Bearer "+key.APIKey)
				r, err := do(client, req)
				if err != nil {
					mu.Lock()
					transport++
					mu.Unlock()
					return // the process is gone
				}
				if responses.Add(1) == killAfter {
					killOnce.Do(s.Kill)
				}
				mu.Lock()
				if r.Status == http.StatusOK {
					var m metered
					if err := json.Unmarshal(r.Body, &m); err != nil {
						t.Errorf("200 for %s with a body that is not the envelope: %s", path, r.Body)
					}
					ok = append(ok, answered{path, r.Header.Get("X-Request-Id"), m.Meta.CreditsUsed, m.Meta.Count})
				} else {
					other[r.Status]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if !s.exited() {
		t.Fatalf("the load ended (%d responses) before the process was killed", responses.Load())
	}
	t.Logf("before SIGKILL and around it: %d answered 200, other statuses %v, %d requests cut off", len(ok), other, transport)
	if len(other) > 0 {
		t.Errorf("statuses other than 200 under load: %v", other)
	}

	restarted := startServe(t, cfg)
	pool := openPool(t, dbURL)
	ctx := context.Background()

	// Every 200 the client received is in the ledger, exactly once.
	var clientCharged int64
	for _, a := range ok {
		if a.requestID == "" {
			t.Errorf("200 for %s without X-Request-Id", a.path)
			continue
		}
		clientCharged += a.creditsUsed
		var charged, deduplicated int
		var delta int64
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE type = 'RequestCharged'),
				count(*) FILTER (WHERE type = 'RequestDeduplicated'),
				coalesce(sum((payload->>'credits_delta')::bigint), 0)::bigint
			FROM events WHERE metadata->>'request_id' = $1`, a.requestID).Scan(&charged, &deduplicated, &delta)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case a.creditsUsed > 0 && (charged != 1 || deduplicated != 0 || delta != -a.creditsUsed):
			t.Errorf("200 for %s (request %s, credits_used %d): %d RequestCharged, %d RequestDeduplicated events, credits_delta %d",
				a.path, a.requestID, a.creditsUsed, charged, deduplicated, delta)
		case a.creditsUsed == 0 && (a.count == nil || *a.count > 0) && charged+deduplicated != 1:
			t.Errorf("free 200 for %s (request %s): %d RequestCharged, %d RequestDeduplicated events, want one",
				a.path, a.requestID, charged, deduplicated)
		}
	}

	// The restarted server reports the balance the ledger holds.
	fresh := restarted.readOK("/api/data/places/"+places[len(places)-1].ID, key.APIKey)
	balance, sum := ledgerTotals(t, pool, accountID)
	if balance != sum || balance != fresh.Meta.CreditsRemaining {
		t.Errorf("accounts.balance %d, sum of credits_delta %d, credits_remaining after restart %d: want all equal",
			balance, sum, fresh.Meta.CreditsRemaining)
	}
	// The server may have charged requests whose answer the kill cut off, never fewer.
	if spent := 5000 - balance - fresh.Meta.CreditsUsed; spent < clientCharged {
		t.Errorf("the ledger holds %d credits charged before the kill, the client received answers charging %d", spent, clientCharged)
	}

	requireAuditClean(t, dbURL)
	restarted.requireLedgerCaughtUp(accountID, balance)
}
