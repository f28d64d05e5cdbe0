package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// readAnswer is a read API answer as a client saw it, kept to compare with the ledger.
type readAnswer struct {
	on, path string
	op       domain.Operation
	status   int
	meta     struct {
		CreditsUsed      int64 `json:"credits_used"`
		CreditsRemaining int64 `json:"credits_remaining"`
		Count            *int  `json:"count"`
		OmittedUnpaid    int   `json:"omitted_unpaid"`
	}
	served []string // the resources the answer served, as the ledger names them
}

// stressLedgerRow is an admin ledger entry with what the comparison needs.
type stressLedgerRow struct {
	Position     int64     `json:"position"`
	Version      int64     `json:"version"`
	Type         string    `json:"type"`
	RecordedAt   time.Time `json:"recorded_at"`
	CreditsDelta int64     `json:"credits_delta"`
	BalanceAfter int64     `json:"balance_after"`
	Payload      struct {
		PaymentRef   string           `json:"payment_ref"`
		OutageID     string           `json:"outage_id"`
		Operation    domain.Operation `json:"operation"`
		Paid         []string         `json:"paid"`
		Deduplicated []string         `json:"deduplicated"`
	} `json:"payload"`
}

// tryAdmin is an admin call that reports a transport error instead of failing the test, with
// its own client (timeout 0: none).
func (s *service) tryAdmin(client *http.Client, method, path string, body any) (response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return response{}, err
	}
	req, err := http.NewRequest(method, s.AdminURL+path, bytes.NewReader(b))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+s.cfg.AdminToken)
	return do(client, req)
}

// Two `kyapi serve` processes on one database. Each account's client reads through both,
// one request at a time, while credits enter its account through both admin APIs —
// purchases sent again after an answer the client lost (its connection cut before the
// answer), bonus grants asked for from both processes at once and once with its answer lost
// — while keys are rotated and revoked and the catalog's places are re-imported (names
// changed, menus dropped and restored) through both. Afterwards: every answer that served
// something is the next charge in its account's ledger, with the resources it served, its
// credits and its balance, and nothing else is; each payment is credited once; each grant
// credits once exactly the accounts with a usable key at its instant; both processes' admin
// reads (account, ledger pages, balance-at) agree with the store; kyapi audit is clean.
func TestCreditsEnteringWhileTwoServeProcessesChargeAddUp(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	places := importCatalog(t, dbURL)
	token := randomToken("admin-")
	env := map[string]string{"RATE_LIMIT_PER_MINUTE": "1000000"}
	a := startServe(t, serveConfig{Name: "A", DatabaseURL: dbURL, AdminToken: token, Env: env})
	b := startServe(t, serveConfig{Name: "B", DatabaseURL: dbURL, AdminToken: token, Env: env})
	procs := []*service{a, b}

	// The place lines of the catalog, to import again with changes.
	path, _ := demoCatalog(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var placeLines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["record"] == "place" && len(placeLines) < 40 {
			placeLines = append(placeLines, rec)
		}
	}
	hot := places[:40] // the places re-imported while read

	type acct struct {
		id   string
		mu   sync.Mutex
		key  string
		keys []issuedKey
	}
	var accounts []*acct
	for i := range 6 {
		// No credits: every read is refused until a purchase or a grant comes in.
		s := procs[i%2]
		var opened struct {
			Data struct {
				AccountID string `json:"account_id"`
			} `json:"data"`
		}
		s.admin(http.MethodPost, "/admin/accounts", map[string]string{"name": fmt.Sprint("Stress ", i), "email": "stress@example.com"}, http.StatusCreated).decode(t, &opened)
		key := s.issueKey(opened.Data.AccountID)
		accounts = append(accounts, &acct{id: opened.Data.AccountID, key: key.APIKey, keys: []issuedKey{key}})
	}
	// An account that is never read but holds a key, and one whose only key is revoked.
	idle, _ := a.openAccount("Idle", 500)
	gone, goneKey := b.openAccount("Gone", 500)
	a.admin(http.MethodPost, "/admin/accounts/"+gone+"/keys/"+goneKey.KeyID+"/revoke", map[string]string{"reason": "test"}, http.StatusOK)

	var (
		mu       sync.Mutex
		answers  = map[string][]readAnswer{}
		payRefs  = map[string]string{}  // payment_ref: account
		payOK    = map[string][]int64{} // payment_ref: credits_added of each 2xx answer
		wg       sync.WaitGroup
		failures = make(chan string, 100)
	)
	fail := func(format string, args ...any) {
		select {
		case failures <- fmt.Sprintf(format, args...):
		default:
		}
	}
	today := time.Now().UTC().Format(time.DateOnly)
	// afterAnswers waits until the readers have had n answers in all: credits come in while
	// they read, by count, not by time.
	var answered atomic.Int64
	afterAnswers := func(n int64) {
		for answered.Load() < n {
			time.Sleep(5 * time.Millisecond)
		}
	}

	// Readers: one per account, one request at a time, alternating processes.
	for i, acc := range accounts {
		rng := rand.New(rand.NewPCG(uint64(i), 3))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer answered.Add(1000) // a reader that stopped early holds no one up
			for n := range 110 {
				s := procs[(n+i)%2]
				p := hot[rng.IntN(len(hot))]
				if rng.IntN(3) == 0 {
					p = places[rng.IntN(len(places))]
				}
				var ans readAnswer
				switch k := rng.IntN(12); {
				case k < 3:
					ans.path, ans.op = "/api/data/places/"+p.ID, domain.OpPlaceDetail
				case k < 5:
					ans.path, ans.op = "/api/data/places/"+p.ID+"/menu", domain.OpPlaceMenu
				case k < 6:
					ans.path, ans.op = "/api/data/places/"+p.ID+"/reviews", domain.OpReviews
				case k < 7:
					ans.path, ans.op = "/api/data/places/"+p.ID+"/related", domain.OpRelated
				case k < 9:
					ans.path, ans.op = fmt.Sprintf("/api/data/places?town=%s&limit=%d&offset=%d", p.Town, 1+rng.IntN(100), rng.IntN(20)), domain.OpPlaceList
				case k < 10:
					ans.path, ans.op = fmt.Sprintf("/api/data/places?q=bourbon&limit=%d&offset=%d", 1+rng.IntN(100), rng.IntN(20)), domain.OpPlaceList
				case k < 11:
					ans.path, ans.op = fmt.Sprintf("/api/data/events?town=%s&from=%s&to=%s", p.Town, today, today), domain.OpEvents
				default:
					ans.path, ans.op = "/api/data/towns", domain.OpTowns
				}
				acc.mu.Lock()
				key := acc.key
				acc.mu.Unlock()
				r, err := s.tryRead(ans.path, key)
				if err != nil {
					fail("GET %s on %s: %v", ans.path, s.cfg.Name, err)
					return
				}
				ans.on, ans.status = s.cfg.Name, r.Status
				switch r.Status {
				case http.StatusOK:
					var env struct {
						Data json.RawMessage `json:"data"`
					}
					if err := json.Unmarshal(r.Body, &env); err != nil {
						fail("GET %s: %v: %s", ans.path, err, r.Body)
						return
					}
					var m struct {
						Meta json.RawMessage `json:"meta"`
					}
					_ = json.Unmarshal(r.Body, &m)
					_ = json.Unmarshal(m.Meta, &ans.meta)
					id := strings.Split(strings.TrimPrefix(ans.path, "/api/data/places/"), "/")[0]
					switch ans.op {
					case domain.OpPlaceDetail:
						var d struct {
							PlaceID string `json:"place_id"`
						}
						_ = json.Unmarshal(env.Data, &d)
						if d.PlaceID != id {
							fail("GET %s served place %q", ans.path, d.PlaceID)
						}
						ans.served = []string{domain.PlaceResource(d.PlaceID)}
					case domain.OpPlaceMenu:
						ans.served = []string{domain.MenuResource(id)}
					case domain.OpReviews:
						ans.served = []string{domain.ReviewsResource(id)}
					case domain.OpRelated:
						ans.served = []string{domain.RelatedResource(id)}
					case domain.OpPlaceList:
						var rows []struct {
							PlaceID string `json:"place_id"`
						}
						_ = json.Unmarshal(env.Data, &rows)
						for _, row := range rows {
							if res := domain.PlaceResource(row.PlaceID); !slices.Contains(ans.served, res) {
								ans.served = append(ans.served, res)
							}
						}
					case domain.OpEvents:
						ans.served = []string{domain.EventsResource(p.Town, today, today)}
					case domain.OpTowns:
						ans.served = []string{domain.TownsResource}
					}
				case http.StatusPaymentRequired, http.StatusNotFound:
				default:
					fail("GET %s on %s: %d %s", ans.path, s.cfg.Name, r.Status, r.Body)
				}
				mu.Lock()
				answers[acc.id] = append(answers[acc.id], ans)
				mu.Unlock()
				answered.Add(1)
			}
		}()
	}

	// Purchases: each sent first with a client that gives up at once (its answer lost, the
	// purchase saved or not), then again on the other process until it is answered.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(5, 5))
		for n := range 10 {
			afterAnswers(int64(60 * n))
			acc := accounts[rng.IntN(len(accounts))]
			ref := fmt.Sprintf("stress-pay-%d", n)
			body := map[string]any{"amount_cents": 500 + rng.IntN(10), "payment_ref": ref}
			mu.Lock()
			payRefs[ref] = acc.id
			mu.Unlock()
			lossy := &http.Client{Timeout: time.Duration(1+rng.IntN(15)) * time.Millisecond}
			tries := []*http.Client{lossy, {Timeout: clientTimeout}}
			for try, client := range tries {
				s := procs[(n+try)%2]
				r, err := s.tryAdmin(client, http.MethodPost, "/admin/accounts/"+acc.id+"/purchases", body)
				if err != nil {
					if client != lossy {
						fail("purchase %s on %s: %v", ref, s.cfg.Name, err)
					}
					continue
				}
				if r.Status != http.StatusCreated && r.Status != http.StatusOK {
					fail("purchase %s on %s: %d %s", ref, s.cfg.Name, r.Status, r.Body)
					continue
				}
				var res struct {
					Data struct {
						CreditsAdded int64 `json:"credits_added"`
					} `json:"data"`
				}
				_ = json.Unmarshal(r.Body, &res)
				mu.Lock()
				payOK[ref] = append(payOK[ref], res.Data.CreditsAdded)
				mu.Unlock()
			}
		}
	}()

	// Key changes on two read accounts: a rotation (the old key keeps working in its grace,
	// the client moves to the new one), then a second rotation.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := range 4 {
			acc := accounts[n%2]
			afterAnswers(int64(100 + 120*n))
			r, err := procs[n%2].tryAdmin(&http.Client{Timeout: clientTimeout}, http.MethodPost, "/admin/accounts/"+acc.id+"/keys", nil)
			if err != nil || r.Status != http.StatusCreated {
				fail("rotating %s: %v %d %s", acc.id, err, r.Status, r.Body)
				return
			}
			var k struct {
				Data issuedKey `json:"data"`
			}
			_ = json.Unmarshal(r.Body, &k)
			acc.mu.Lock()
			acc.key = k.Data.APIKey
			acc.keys = append(acc.keys, k.Data)
			acc.mu.Unlock()
		}
	}()

	// Bonus grants: one asked for from both processes at once, one whose first answer is lost
	// and which is asked for again.
	wg.Add(1)
	go func() {
		defer wg.Done()
		afterAnswers(200)
		var gw sync.WaitGroup
		for _, s := range procs {
			gw.Add(1)
			go func() {
				defer gw.Done()
				r, err := s.tryAdmin(&http.Client{Timeout: clientTimeout}, http.MethodPost, "/admin/bonus-grants",
					map[string]any{"outage_id": "stress-outage-1", "credits": 111, "reason": "stress"})
				if err != nil || r.Status != http.StatusCreated && r.Status != http.StatusOK {
					fail("grant on %s: %v %d %s", s.cfg.Name, err, r.Status, r.Body)
				}
			}()
		}
		gw.Wait()
		afterAnswers(450)
		_, _ = b.tryAdmin(&http.Client{Timeout: 2 * time.Millisecond}, http.MethodPost, "/admin/bonus-grants",
			map[string]any{"outage_id": "stress-outage-2", "credits": 222, "reason": "stress"})
		r, err := a.tryAdmin(&http.Client{Timeout: clientTimeout}, http.MethodPost, "/admin/bonus-grants",
			map[string]any{"outage_id": "stress-outage-2", "credits": 222, "reason": "stress"})
		if err != nil || r.Status != http.StatusCreated && r.Status != http.StatusOK {
			fail("grant asked again on A: %v %d %s", err, r.Status, r.Body)
		}
	}()

	// Catalog imports through both processes: the hot places renamed, their menus dropped,
	// then restored.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := range 6 {
			afterAnswers(int64(100 * n))
			var buf bytes.Buffer
			for i, line := range placeLines {
				rec := map[string]any{}
				for k, v := range line {
					rec[k] = v
				}
				rec["name"] = fmt.Sprintf("%v (v%d)", line["name"], n)
				if n%2 == 0 && i%2 == 0 {
					delete(rec, "menu")
				}
				b, _ := json.Marshal(rec)
				buf.Write(append(b, '\n'))
			}
			s := procs[n%2]
			req, _ := http.NewRequest(http.MethodPost, s.AdminURL+"/admin/catalog/import", bytes.NewReader(buf.Bytes()))
			req.Header.Set("Authorization", "Bearer "+token)
			r, err := do(&http.Client{Timeout: clientTimeout}, req)
			if err != nil || r.Status != http.StatusOK {
				fail("import on %s: %v %d %s", s.cfg.Name, err, r.Status, r.Body)
			}
		}
	}()
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if t.Failed() {
		return
	}

	statuses := map[int]int{}
	for _, as := range answers {
		for _, ans := range as {
			statuses[ans.status]++
		}
	}
	lost := 0
	for ref := range payRefs {
		lost += 2 - len(payOK[ref])
	}
	t.Logf("read answers by status %v; %d of %d purchases lost their first answer", statuses, lost, len(payRefs))

	pool := openPool(t, dbURL)
	ctx := context.Background()
	var all []string
	for _, acc := range accounts {
		all = append(all, acc.id)
	}
	all = append(all, idle, gone)
	credited := map[string]map[string]int{} // outage: account: times
	paid := map[string][]string{}           // payment_ref: accounts
	for _, id := range all {
		// The account as both processes show it, and its ledger read in small pages through
		// both, against the store.
		var views []int64
		for _, s := range procs {
			var v struct {
				Data struct {
					Balance int64 `json:"balance"`
				} `json:"data"`
			}
			s.admin(http.MethodGet, "/admin/accounts/"+id, nil, http.StatusOK).decode(t, &v)
			views = append(views, v.Data.Balance)
		}
		var rows []stressLedgerRow
		for after, n := int64(0), 0; ; n++ {
			var page struct {
				Data      []stressLedgerRow `json:"data"`
				NextAfter *int64            `json:"next_after"`
			}
			procs[n%2].admin(http.MethodGet, fmt.Sprintf("/admin/accounts/%s/ledger?limit=9&after=%d", id, after), nil, http.StatusOK).decode(t, &page)
			rows = append(rows, page.Data...)
			if page.NextAfter == nil {
				break
			}
			after = *page.NextAfter
		}
		balance, sum := ledgerTotals(t, pool, id)
		var deltas int64
		for i, r := range rows {
			deltas += r.CreditsDelta
			if r.Version != int64(i+1) || r.BalanceAfter != deltas {
				t.Errorf("%s: ledger entry %d: %+v; sum of deltas %d", id, i+1, r, deltas)
			}
			switch r.Type {
			case domain.EventCreditsPurchased:
				paid[r.Payload.PaymentRef] = append(paid[r.Payload.PaymentRef], id)
			case domain.EventBonusGranted:
				if credited[r.Payload.OutageID] == nil {
					credited[r.Payload.OutageID] = map[string]int{}
				}
				credited[r.Payload.OutageID][id]++
			}
		}
		if views[0] != balance || views[1] != balance || deltas != sum || sum != balance {
			t.Errorf("%s: balance on A %d, on B %d, in the store %d; ledger pages sum to %d, the store's events to %d", id, views[0], views[1], balance, deltas, sum)
		}
		// balance-at at each fact's instant, through both processes.
		for i, r := range rows {
			if i+1 < len(rows) && rows[i+1].RecordedAt.Equal(r.RecordedAt) {
				continue
			}
			var at struct {
				Data struct {
					Balance int64 `json:"balance"`
				} `json:"data"`
			}
			q := r.RecordedAt.UTC().Format(time.RFC3339Nano)
			procs[i%2].admin(http.MethodGet, "/admin/accounts/"+id+"/balance-at?at="+q, nil, http.StatusOK).decode(t, &at)
			if at.Data.Balance != r.BalanceAfter {
				t.Errorf("%s: balance-at %s on %s is %d, the ledger says %d", id, q, procs[i%2].cfg.Name, at.Data.Balance, r.BalanceAfter)
			}
		}

		// Every answer that served something is the account's next charge, and nothing else is.
		var charges []stressLedgerRow
		for _, r := range rows {
			if r.Type == domain.EventRequestCharged || r.Type == domain.EventRequestDeduplicated {
				charges = append(charges, r)
			}
		}
		next := 0
		for _, ans := range answers[id] {
			if ans.status != http.StatusOK || len(ans.served) == 0 {
				continue
			}
			if next >= len(charges) {
				t.Errorf("%s: %s on %s answered 200 %+v serving %v, but the ledger has no charge left", id, ans.path, ans.on, ans.meta, ans.served)
				continue
			}
			c := charges[next]
			next++
			got := append(slices.Clone(c.Payload.Paid), c.Payload.Deduplicated...)
			slices.Sort(got)
			want := slices.Clone(ans.served)
			slices.Sort(want)
			if c.Payload.Operation != ans.op || -c.CreditsDelta != ans.meta.CreditsUsed || c.BalanceAfter != ans.meta.CreditsRemaining ||
				!slices.Equal(slices.Compact(got), want) {
				t.Errorf("%s: %s on %s answered credits_used %d, credits_remaining %d serving %v; its ledger charge is %s %d credits, balance %d, paid %v, deduplicated %v",
					id, ans.path, ans.on, ans.meta.CreditsUsed, ans.meta.CreditsRemaining, want, c.Payload.Operation, -c.CreditsDelta, c.BalanceAfter,
					c.Payload.Paid, c.Payload.Deduplicated)
			}
		}
		if next != len(charges) {
			t.Errorf("%s: the ledger holds %d charges, the answers that served something %d", id, len(charges), next)
		}
	}
	for _, id := range all {
		requireNothingPaidTwice(t, pool, id)
	}

	// Payments: each credited once, to its account, as every 2xx answer said.
	for ref, id := range payRefs {
		if len(paid[ref]) != 1 || paid[ref][0] != id {
			t.Errorf("payment %s (account %s) credited to %v", ref, id, paid[ref])
		}
		var credits int64
		if err := pool.QueryRow(ctx, `SELECT credits_added FROM purchases WHERE payment_ref = $1`, ref).Scan(&credits); err != nil {
			t.Errorf("payment %s: %v", ref, err)
		}
		for _, c := range payOK[ref] {
			if c != credits {
				t.Errorf("payment %s answered credits_added %d, recorded %d", ref, c, credits)
			}
		}
	}

	// Grants: exactly the accounts with a usable key at the grant's instant, once each.
	for _, outage := range []string{"stress-outage-1", "stress-outage-2"} {
		var eligible []string
		var accountsCredited int
		var state string
		if err := pool.QueryRow(ctx, `SELECT g.accounts, g.state, coalesce((SELECT array_agg(DISTINCT k.account_id ORDER BY k.account_id) FROM api_keys k
				WHERE k.issued_at <= g.granted_at AND (k.revoked_at IS NULL OR k.revoked_at > g.granted_at)
					AND (k.grace_until IS NULL OR k.grace_until > g.granted_at)), '{}')
			FROM bonus_grants g WHERE outage_id = $1`, outage).Scan(&accountsCredited, &state, &eligible); err != nil {
			t.Fatalf("grant %s: %v", outage, err)
		}
		if state != "done" || accountsCredited != len(eligible) || len(eligible) != len(accounts)+1 || slices.Contains(eligible, gone) {
			t.Errorf("grant %s: state %s, %d accounts credited; eligible %v", outage, state, accountsCredited, eligible)
		}
		for _, id := range all {
			want := 0
			if slices.Contains(eligible, id) {
				want = 1
			}
			if credited[outage][id] != want {
				t.Errorf("grant %s credited %s %d times, want %d", outage, id, credited[outage][id], want)
			}
		}
	}
	requireAuditClean(t, dbURL)
}
