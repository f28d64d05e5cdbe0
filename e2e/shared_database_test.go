package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/pgtest"
)

func TestTwoServeProcessesShareOneDatabase(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	places := importCatalog(t, dbURL)
	token := randomToken("admin-")
	a := startServe(t, serveConfig{Name: "A", DatabaseURL: dbURL, AdminToken: token})
	b := startServe(t, serveConfig{Name: "B", DatabaseURL: dbURL, AdminToken: token})

	accountID, key := a.openAccount("Shared", 500)

	// A key issued through A works on B at once: its very first request is a 200.
	first := b.readOK("/api/data/places/"+places[0].ID, key.APIKey)
	if first.Meta.CreditsUsed != 1 || first.Meta.Deduplicated {
		t.Errorf("first detail on B: credits_used %d, deduplicated %v; want 1, false", first.Meta.CreditsUsed, first.Meta.Deduplicated)
	}

	// The same place on A, then on B, is charged once.
	onA := a.readOK("/api/data/places/"+places[1].ID, key.APIKey)
	onB := b.readOK("/api/data/places/"+places[1].ID, key.APIKey)
	if onA.Meta.CreditsUsed != 1 || onA.Meta.Deduplicated {
		t.Errorf("detail on A: credits_used %d, deduplicated %v; want 1, false", onA.Meta.CreditsUsed, onA.Meta.Deduplicated)
	}
	if onB.Meta.CreditsUsed != 0 || !onB.Meta.Deduplicated {
		t.Errorf("same detail on B: credits_used %d, deduplicated %v; want 0, true", onB.Meta.CreditsUsed, onB.Meta.Deduplicated)
	}
	if onB.Meta.CreditsRemaining != onA.Meta.CreditsRemaining {
		t.Errorf("credits_remaining: %d on A, then %d on B for a deduplicated request", onA.Meta.CreditsRemaining, onB.Meta.CreditsRemaining)
	}

	// Both answer the place list for a town, from their own place index.
	remaining := onB.Meta.CreditsRemaining
	for _, s := range []*service{a, b} {
		list := s.readOK("/api/data/places?town=lexington&limit=5", key.APIKey)
		remaining = list.Meta.CreditsRemaining
		var rows []struct {
			PlaceID  string `json:"place_id"`
			TownSlug string `json:"town_slug"`
		}
		if err := json.Unmarshal(list.Data, &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			t.Errorf("place list for lexington on %s is empty", s.cfg.Name)
		}
		for _, r := range rows {
			if !strings.HasPrefix(r.TownSlug, "lexington-fayette") {
				t.Errorf("place list for lexington on %s holds %s of town %q", s.cfg.Name, r.PlaceID, r.TownSlug)
			}
		}
	}

	// A key revoked through B is refused by A at once.
	b.admin(http.MethodPost, "/admin/accounts/"+accountID+"/keys/"+key.KeyID+"/revoke", map[string]string{"reason": "e2e"}, http.StatusOK)
	for _, s := range []*service{a, b} {
		r := s.read("/api/data/places/"+places[2].ID, key.APIKey)
		if r.Status != http.StatusForbidden || r.errorCode() != "revoked_api_key" {
			t.Errorf("revoked key on %s: status %d code %q, want 403 revoked_api_key: %s", s.cfg.Name, r.Status, r.errorCode(), r.Body)
		}
	}

	balance, sum := ledgerTotals(t, openPool(t, dbURL), accountID)
	if balance != sum || balance != remaining {
		t.Errorf("balance %d, sum of credits_delta %d, last credits_remaining %d: want all equal", balance, sum, remaining)
	}
}

// A revoke through one process races a burst of requests with the key on another: no request
// that started after the revoke call returned is served, whatever the other process had cached.
func TestARevokeRacingABurstOnAnotherProcessServesNothingStartedAfterItReturned(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	places := importCatalog(t, dbURL)
	token := randomToken("admin-")
	a := startServe(t, serveConfig{Name: "A", DatabaseURL: dbURL, AdminToken: token})
	b := startServe(t, serveConfig{Name: "B", DatabaseURL: dbURL, AdminToken: token,
		Env: map[string]string{"RATE_LIMIT_PER_MINUTE": "1000000"}})
	accountID, key := a.openAccount("Racing", 2500)
	b.readOK("/api/data/places/"+places[0].ID, key.APIKey) // B has the key cached as active

	type result struct {
		started time.Time
		status  int
	}
	var (
		mu      sync.Mutex
		results []result
		revoked time.Time
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				started := time.Now()
				r := b.read("/api/data/places/"+places[(g*37+i)%len(places)].ID, key.APIKey)
				mu.Lock()
				results = append(results, result{started, r.Status})
				mu.Unlock()
				if r.Status != http.StatusOK && r.Status != http.StatusForbidden {
					t.Errorf("status %d during the race: %s", r.Status, r.Body)
				}
			}
		}()
	}
	// A wait that fails stops the burst before the test ends.
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	// startedSince counts the requests that started after t.
	startedSince := func(t time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if r.started.After(t) {
				n++
			}
		}
		return n
	}
	// The burst runs before and after the revoke: waited for by count, not by time, since a
	// starved machine may answer few requests in a fixed while.
	eventually(t, recoveryWait, "the burst is under way", func() error {
		if n := startedSince(time.Time{}); n < 16 {
			return fmt.Errorf("%d requests answered", n)
		}
		return nil
	})
	a.admin(http.MethodPost, "/admin/accounts/"+accountID+"/keys/"+key.KeyID+"/revoke", nil, http.StatusOK)
	revoked = time.Now()
	eventually(t, recoveryWait, "requests that started after the revoke returned are answered", func() error {
		if n := startedSince(revoked); n < 16 {
			return fmt.Errorf("%d answered", n)
		}
		return nil
	})
	stop.Store(true)
	wg.Wait()

	var before, after, servedAfter int
	for _, r := range results {
		if r.started.After(revoked) {
			after++
			if r.status == http.StatusOK {
				servedAfter++
			}
		} else {
			before++
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("%d requests before the revoke returned and %d after: the race did not happen", before, after)
	}
	if servedAfter > 0 {
		t.Fatalf("%d of the %d requests that started after the revoke returned were served", servedAfter, after)
	}
	requireNothingPaidTwice(t, openPool(t, dbURL), accountID)
}
