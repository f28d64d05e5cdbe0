package e2e

import (
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
	placeID     string // of a place detail; "" for a list
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
				placeID := places[g*perClient+i].ID
				path := "/api/data/places/" + placeID
				if i%4 == 3 {
					path, placeID = fmt.Sprintf("/api/data/places?town=louisville&limit=5&offset=%d", ((g*perClient+i)%14)*5), ""
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
					ok = append(ok, answered{path, placeID, m.Meta.CreditsUsed, m.Meta.Count})
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

	// Every paid 200 the client received is in the ledger, exactly once: a paid place detail
	// is the one RequestCharged event that paid its place today.
	var clientCharged int64
	for _, a := range ok {
		clientCharged += a.creditsUsed
		if a.placeID == "" || a.creditsUsed == 0 {
			continue
		}
		if n := paidEvents(t, pool, accountID, "place:"+a.placeID); n != 1 {
			t.Errorf("200 for %s (credits_used %d): %d RequestCharged events paid the place, want 1", a.path, a.creditsUsed, n)
		}
	}
	requireNothingPaidTwice(t, pool, accountID)

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
