package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// A bonus grant whose process is killed (SIGKILL) mid-way, while another process charges the
// accounts, is finished by the killed process starting again and by the other process asked
// for the same grant at the same time: every account with a usable key is credited once, the
// others not, the balances add up and the audit is clean (docs/api.md, "Admin API").
func TestAGrantKilledMidWayIsFinishedOnceAfterRestart(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	places := importCatalog(t, dbURL)
	token := randomToken("admin-")
	env := map[string]string{"RATE_LIMIT_PER_MINUTE": "1000000"}
	cfgA := serveConfig{Name: "A", DatabaseURL: dbURL, DataDir: t.TempDir(), AdminToken: token, Env: env}
	a := startServe(t, cfgA)
	b := startServe(t, serveConfig{Name: "B", DatabaseURL: dbURL, AdminToken: token, Env: env})

	type acct struct{ id, key string }
	var accounts []acct
	for i := range 5 {
		id, key := b.openAccount(fmt.Sprint("Granted", i), 500)
		accounts = append(accounts, acct{id, key.APIKey})
	}
	sort.Slice(accounts, func(i, j int) bool { return accounts[i].id < accounts[j].id })
	noKey, _ := b.openAccount("Revoked", 500)
	var keys struct {
		Data struct {
			Keys []struct {
				KeyID string `json:"key_id"`
			} `json:"keys"`
		} `json:"data"`
	}
	b.admin(http.MethodGet, "/admin/accounts/"+noKey, nil, http.StatusOK).decode(t, &keys)
	b.admin(http.MethodPost, "/admin/accounts/"+noKey+"/keys/"+keys.Data.Keys[0].KeyID+"/revoke", nil, http.StatusOK)

	// The third account's row is held (a slow transaction): the grant credits the two before
	// it, then waits for it.
	pool := openPool(t, dbURL)
	ctx := context.Background()
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, accounts[2].id); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = a.tryAdmin(&http.Client{Timeout: clientTimeout}, http.MethodPost, "/admin/bonus-grants",
			map[string]any{"outage_id": "killed-outage", "credits": 50, "reason": "outage"})
	}()
	eventually(t, recoveryWait, "the grant credits the accounts before the held one", func() error {
		var n int
		if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT accounts FROM bonus_grants WHERE outage_id = 'killed-outage'), -1)`).Scan(&n); err != nil {
			return err
		}
		if n != 2 {
			return fmt.Errorf("%d accounts credited", n)
		}
		return nil
	})

	// B charges every account while A is killed, the row let go, A started again and B asked
	// for the same grant.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i, acc := range accounts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := b.tryRead("/api/data/places/"+places[(i*50+n)%len(places)].ID, acc.key)
				if err != nil || r.Status != http.StatusOK {
					t.Errorf("charging %s on B: %v %d %s", acc.id, err, r.Status, r.Body)
					return
				}
			}
		}()
	}
	a.Kill()
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	again := make(chan response, 1)
	go func() {
		r, err := b.tryAdmin(&http.Client{Timeout: clientTimeout}, http.MethodPost, "/admin/bonus-grants",
			map[string]any{"outage_id": "killed-outage", "credits": 70, "reason": "asked again"})
		if err != nil {
			t.Error(err)
		}
		again <- r
	}()
	startServe(t, cfgA)
	if r := <-again; r.Status != http.StatusCreated {
		t.Errorf("the grant asked for again on B: %d %s", r.Status, r.Body)
	}
	eventually(t, recoveryWait, "the grant is done", func() error {
		var state string
		if err := pool.QueryRow(ctx, `SELECT state FROM bonus_grants WHERE outage_id = 'killed-outage'`).Scan(&state); err != nil {
			return err
		}
		if state != "done" {
			return fmt.Errorf("state %s", state)
		}
		return nil
	})
	close(stop)
	wg.Wait()

	var credited int
	if err := pool.QueryRow(ctx, `SELECT accounts FROM bonus_grants WHERE outage_id = 'killed-outage'`).Scan(&credited); err != nil {
		t.Fatal(err)
	}
	if credited != len(accounts) {
		t.Errorf("the grant counts %d accounts credited, want %d", credited, len(accounts))
	}
	for _, id := range append([]string{noKey}, func() (ids []string) {
		for _, acc := range accounts {
			ids = append(ids, acc.id)
		}
		return
	}()...) {
		var bonuses []int64
		rows, err := pool.Query(ctx, accountEvents+`SELECT (payload->>'credits_delta')::bigint FROM e WHERE type = 'BonusGranted'`, "account-"+id)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var c int64
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			bonuses = append(bonuses, c)
		}
		if want := []int64{50}; id == noKey && len(bonuses) != 0 || id != noKey && !slices.Equal(bonuses, want) {
			t.Errorf("%s: bonuses %v", id, bonuses)
		}
		if balance, sum := ledgerTotals(t, pool, id); balance != sum {
			t.Errorf("%s: balance %d, its ledger sums to %d", id, balance, sum)
		}
		requireNothingPaidTwice(t, pool, id)
	}
	requireAuditClean(t, dbURL)
}
