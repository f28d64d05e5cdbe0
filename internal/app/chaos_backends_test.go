package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/app"
	"github.com/kyapi/kyapi/internal/apptest"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// chaosProc is one `kyapi serve` run in the test's process, over a shared database, its
// connections named so that the test can find its backends.
type chaosProc struct {
	name              string
	readURL, adminURL string
	log               *adminLog
}

func startChaosProc(t *testing.T, dbURL, name string, log *adminLog) *chaosProc {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	svc := apptest.StartWith(t, app.Config{DatabaseURL: u.String(), AdminToken: chaosAdminToken, RateLimit: 100000})
	return &chaosProc{name: name, readURL: svc.ReadURL, adminURL: svc.AdminURL, log: log}
}

const chaosAdminToken = "chaos-admin-token-0123456789"

var ctx = context.Background()

// chaosAnswer is one read request as its client saw it.
type chaosAnswer struct {
	proc     int
	account  int
	key      int // index in the account's keys
	path     string
	resource string // for a fixed-cost operation; "" for a list
	started  time.Time
	status   int // 0: no answer (the client went away, or the connection broke)
	code     string
	outcome  string
	used     int64
	header   string // X-Credits-Remaining
	served   []string
	gaveUp   bool // the client went away on purpose
}

type chaosKey struct {
	id, apiKey string
	revokedAt  time.Time
}

type chaosAccount struct {
	id   string
	mu   sync.Mutex
	keys []*chaosKey
}

// admin calls a process's admin API, and keeps the answer in p.log.
func (p *chaosProc) admin(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, p.adminURL+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+chaosAdminToken)
	a := adminAnswer{method: method, path: path, body: body}
	defer func() { p.log.add(a) }()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		a.status, a.outcome, a.answer = resp.StatusCode, resp.Header.Get("X-Charge-Outcome"), string(b)
	}
	return resp.StatusCode, b, err
}

// adminAnswer is an admin call as its client saw it (status 0: no answer).
type adminAnswer struct {
	method, path, body string
	status             int
	outcome, answer    string
}

type adminLog struct {
	mu      sync.Mutex
	answers []adminAnswer
}

func (l *adminLog) add(a adminAnswer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers = append(l.answers, a)
}

// mustAdmin calls the admin API until it answers something other than 503 (at most 100
// times), and fails unless that is want.
func mustAdmin(t *testing.T, procs []*chaosProc, method, path, body string, want int) []byte {
	t.Helper()
	var st int
	var b []byte
	var err error
	for i := range 1000 {
		st, b, err = procs[i%len(procs)].admin(method, path, body)
		if err == nil && st != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st != want {
		t.Fatalf("%s %s: %d %s %v; want %d", method, path, st, b, err, want)
	}
	return b
}

// Two serve processes share a database while a third connection ends their backends at
// random (pg_terminate_backend, pg_cancel_backend): pooled connections, a batch's
// transaction, the rate limiter's, the key cache's LISTEN connection, the projections'. Clients
// read through both, some going away mid-request; credits are bought and keys revoked through
// both admin APIs. Afterwards every answer agrees with the ledger, balances and read models add
// up, the audit is clean, no handler is left running, and both processes serve, count rates
// together and refuse a revoked key again.
func TestServeProcessesWhoseBackendsAreEndedAtRandomLoseNoCredit(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	adminAnswers := &adminLog{}
	procs := []*chaosProc{startChaosProc(t, dbURL, "kyapi-chaos-a", adminAnswers), startChaosProc(t, dbURL, "kyapi-chaos-b", adminAnswers)}

	const nPlaces = 40
	var catalog strings.Builder
	catalog.WriteString(`{"record":"town","slug":"berea","name":"Berea"}` + "\n")
	for i := range nPlaces {
		fmt.Fprintf(&catalog, `{"record":"place","place_id":"plc_%d","name":"Place %d","category":"food.cafe","town_slug":"berea","rating_count":%d,`+
			`"menu":[{"name":"Pie","price":3}],"review_summary":{"summary":"Good.","confidence":0.5,"review_count":3}}`+"\n", i, i, 100-i)
	}
	mustAdmin(t, procs, http.MethodPost, "/admin/catalog/import", catalog.String(), http.StatusOK)

	const nAccounts = 8
	accounts := make([]*chaosAccount, nAccounts)
	for i := range accounts {
		var opened struct {
			Data struct {
				AccountID string `json:"account_id"`
			} `json:"data"`
		}
		_ = json.Unmarshal(mustAdmin(t, procs, http.MethodPost, "/admin/accounts", `{"name":"Chaos","email":"c@example.com"}`, http.StatusCreated), &opened)
		accounts[i] = &chaosAccount{id: opened.Data.AccountID}
		accounts[i].keys = []*chaosKey{issueChaosKey(t, procs, accounts[i].id)}
		mustAdmin(t, procs, http.MethodPost, "/admin/accounts/"+accounts[i].id+"/purchases", fmt.Sprintf(`{"amount_cents":500,"payment_ref":"first-%d"}`, i), http.StatusCreated)
	}
	// Both processes' place indexes hold the catalog before the load starts.
	for _, p := range procs {
		for try := 0; ; try++ {
			st, b := chaosRead(t, p, accounts[0].keys[0].apiKey, "/api/data/places?town=berea&limit=100")
			var m struct {
				Meta struct {
					Count int `json:"count"`
				} `json:"meta"`
			}
			_ = json.Unmarshal(b, &m)
			if st == http.StatusOK && m.Meta.Count == nPlaces {
				break
			}
			if try == 2400 {
				t.Fatalf("%s never listed the catalog: %d %s", p.name, st, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	http.DefaultClient.CloseIdleConnections()
	goroutines := runtime.NumGoroutine()
	var (
		mu      sync.Mutex
		answers []chaosAnswer
		load    sync.WaitGroup
		done    atomic.Bool
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	for w := range 10 {
		rng := rand.New(rand.NewPCG(uint64(w), 61))
		load.Add(1)
		go func() {
			defer load.Done()
			for range 120 {
				ai := rng.IntN(nAccounts)
				acc := accounts[ai]
				acc.mu.Lock()
				ki := len(acc.keys) - 1
				key := acc.keys[ki]
				acc.mu.Unlock()
				a := chaosAnswer{proc: rng.IntN(2), account: ai, key: ki, started: time.Now()}
				place := fmt.Sprint("plc_", rng.IntN(nPlaces))
				switch n := rng.IntN(10); {
				case n < 4:
					a.path, a.resource = "/api/data/places/"+place, "place:"+place
				case n < 6:
					a.path, a.resource = "/api/data/places/"+place+"/menu", "menu:"+place
				case n < 7:
					a.path, a.resource = "/api/data/places/"+place+"/reviews", "reviews:"+place
				case n < 9:
					a.path = fmt.Sprintf("/api/data/places?town=berea&limit=%d&offset=%d", 1+rng.IntN(15), rng.IntN(nPlaces))
				default:
					a.path, a.resource = "/api/data/towns", "towns"
				}
				reqCtx, cancel := context.WithCancel(ctx)
				if rng.IntN(8) == 0 {
					a.gaveUp = true
					time.AfterFunc(time.Duration(rng.IntN(20000))*time.Microsecond, cancel)
				}
				req, _ := http.NewRequestWithContext(reqCtx, http.MethodGet, procs[a.proc].readURL+a.path, nil)
				req.Header.Set("Authorization", "Bearer "+key.apiKey)
				if resp, err := client.Do(req); err == nil {
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil {
						a.status = resp.StatusCode
						a.header = resp.Header.Get("X-Credits-Remaining")
						a.outcome = resp.Header.Get("X-Charge-Outcome")
						parseChaosAnswer(&a, body)
					}
				}
				cancel()
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		}()
	}
	// Purchases, each sent again until answered (to the other process), as a client does.
	load.Add(1)
	go func() {
		defer load.Done()
		rng := rand.New(rand.NewPCG(1, 67))
		for i := range 20 {
			acc := accounts[rng.IntN(nAccounts)]
			for try := 0; try < 100; try++ {
				st, _, err := procs[(i+try)%2].admin(http.MethodPost, "/admin/accounts/"+acc.id+"/purchases",
					fmt.Sprintf(`{"amount_cents":500,"payment_ref":"chaos-%d"}`, i))
				if err == nil && (st == http.StatusCreated || st == http.StatusOK) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	// Revokes, each followed by a new key; revokedAt is when the revoke's 200 came back.
	load.Add(1)
	go func() {
		defer load.Done()
		rng := rand.New(rand.NewPCG(2, 71))
		for range 16 {
			acc := accounts[rng.IntN(nAccounts)]
			acc.mu.Lock()
			k := acc.keys[len(acc.keys)-1]
			for try := 0; try < 100; try++ {
				// Sent again after a 503 or a lost answer: a key already revoked is answered 200.
				st, _, err := procs[try%2].admin(http.MethodPost, "/admin/accounts/"+acc.id+"/keys/"+k.id+"/revoke", `{"reason":"chaos"}`)
				if err == nil && st == http.StatusOK {
					k.revokedAt = time.Now()
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if k.revokedAt.IsZero() {
				t.Errorf("revoke of %s never answered", k.id)
			}
			if k := issueChaosKeyTrying(procs, acc.id); k != nil {
				acc.keys = append(acc.keys, k)
			} else {
				t.Errorf("no key issued for %s", acc.id)
			}
			acc.mu.Unlock()
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		}
	}()
	go func() {
		load.Wait()
		done.Store(true)
	}()

	killer, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close(ctx)
	rng := rand.New(rand.NewPCG(9, 73))
	kills := map[string]int{}
	for i := 0; i < 100000 && !done.Load(); i++ {
		var filter string
		switch rng.IntN(4) {
		case 0:
			filter = `true`
		case 1:
			filter = `state = 'active' AND query LIKE '%kyapi_charge%'`
		case 2:
			filter = `state = 'active' AND query = 'COMMIT'`
		default:
			filter = `state IN ('idle in transaction', 'active')`
		}
		fn := "pg_terminate_backend"
		if rng.IntN(3) == 0 {
			fn = "pg_cancel_backend"
		}
		var n int
		if err := killer.QueryRow(ctx, `SELECT count(`+fn+`(pid)) FROM (SELECT pid FROM pg_stat_activity
			WHERE application_name LIKE 'kyapi-chaos-%' AND pid <> pg_backend_pid() AND `+filter+`
			ORDER BY random() LIMIT 1) p`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		kills[fn+" "+filter] += n
		time.Sleep(time.Duration(rng.IntN(15000)) * time.Microsecond)
	}
	load.Wait()
	t.Logf("ended: %v", kills)
	client.CloseIdleConnections()

	// No handler is left running once every client has its answer or went away.
	var stacks bytes.Buffer
	for try := 0; ; try++ {
		stacks.Reset()
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
		if !strings.Contains(stacks.String(), "readapi.(*Server).authorized") {
			break
		}
		if try == 1200 {
			t.Fatalf("handlers still running after the load:\n%s", stacks.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Nor anything else a lost connection started (a lookup of a batch's outcome, a
	// connection of its own): the process holds about as many goroutines as before the load.
	for try := 0; runtime.NumGoroutine() > goroutines+20; try++ {
		if try == 1200 {
			stacks.Reset()
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Fatalf("%d goroutines after the load, %d before:\n%s", runtime.NumGoroutine(), goroutines, stacks.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	checkChaosAnswers(t, pool, procs, accounts, answers)
	checkAdminAnswers(t, pool, accounts, adminAnswers.answers)

	// Both processes serve again, count each key's requests together, and refuse a key as
	// soon as its revoke returned.
	acc := accounts[0]
	fresh := issueChaosKey(t, procs, acc.id)
	var shared bool
	for try := 0; try < 1200 && !shared; try++ {
		var remaining []int
		for _, p := range procs {
			req, _ := http.NewRequest(http.MethodGet, p.readURL+"/api/data/towns", nil)
			req.Header.Set("Authorization", "Bearer "+fresh.apiKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPaymentRequired {
				n, _ := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining"))
				remaining = append(remaining, n)
			}
		}
		shared = len(remaining) == 2 && remaining[1] == remaining[0]-1
		if !shared {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !shared {
		t.Error("the processes never counted a key's requests together again")
	}
	mustAdmin(t, procs, http.MethodPost, "/admin/accounts/"+acc.id+"/keys/"+fresh.id+"/revoke", `{}`, http.StatusOK)
	for _, p := range procs {
		st, b := chaosRead(t, p, fresh.apiKey, "/api/data/towns")
		for try := 0; st == http.StatusServiceUnavailable && try < 100; try++ { // a pooled connection that was ended
			st, b = chaosRead(t, p, fresh.apiKey, "/api/data/towns")
		}
		if st != http.StatusForbidden {
			t.Errorf("%s: a revoked key answered %d %s", p.name, st, b)
		}
	}
}

func issueChaosKey(t *testing.T, procs []*chaosProc, accountID string) *chaosKey {
	t.Helper()
	var issued struct {
		Data struct {
			KeyID  string `json:"key_id"`
			APIKey string `json:"api_key"`
		} `json:"data"`
	}
	_ = json.Unmarshal(mustAdmin(t, procs, http.MethodPost, "/admin/accounts/"+accountID+"/keys", "", http.StatusCreated), &issued)
	return &chaosKey{id: issued.Data.KeyID, apiKey: issued.Data.APIKey}
}

// issueChaosKeyTrying issues a key, trying until it is answered; nil if it never is.
func issueChaosKeyTrying(procs []*chaosProc, accountID string) *chaosKey {
	for try := 0; try < 100; try++ {
		st, b, err := procs[try%2].admin(http.MethodPost, "/admin/accounts/"+accountID+"/keys", "")
		if err == nil && st == http.StatusCreated {
			var issued struct {
				Data struct {
					KeyID  string `json:"key_id"`
					APIKey string `json:"api_key"`
				} `json:"data"`
			}
			_ = json.Unmarshal(b, &issued)
			return &chaosKey{id: issued.Data.KeyID, apiKey: issued.Data.APIKey}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func chaosRead(t *testing.T, p *chaosProc, key, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.readURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// parseChaosAnswer reads what an answer served and what it said it charged.
func parseChaosAnswer(a *chaosAnswer, body []byte) {
	if a.status != http.StatusOK {
		var e struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(body, &e)
		a.code = e.Code
		return
	}
	var ok struct {
		Data json.RawMessage `json:"data"`
		Meta struct {
			CreditsUsed int64 `json:"credits_used"`
		} `json:"meta"`
	}
	_ = json.Unmarshal(body, &ok)
	a.used = ok.Meta.CreditsUsed
	if a.resource != "" {
		a.served = []string{a.resource}
		return
	}
	var rows []struct {
		PlaceID string `json:"place_id"`
	}
	_ = json.Unmarshal(ok.Data, &rows)
	for _, r := range rows {
		a.served = append(a.served, "place:"+r.PlaceID)
	}
}

// checkChaosAnswers compares the answers of TestServeProcessesWhoseBackendsAreEndedAtRandomLoseNoCredit
// with the store, the admin API and the read models.
func checkChaosAnswers(t *testing.T, pool *pgxpool.Pool, procs []*chaosProc, accounts []*chaosAccount, answers []chaosAnswer) {
	t.Helper()
	type event struct {
		op       string
		paid     []string
		credits  int64
		balance  int64
		matched  bool
		position int64
	}
	tally := map[string]int{}
	for ai, acc := range accounts {
		rows, err := pool.Query(ctx, `SELECT e.position, e.type, e.payload::text FROM events e JOIN streams s USING (stream_no)
			WHERE s.stream_id = 'account-' || $1 ORDER BY e.version`, acc.id)
		if err != nil {
			t.Fatal(err)
		}
		var events []*event
		byResource := map[string]*event{}
		var balance, purchased, charged int64
		var position int64
		var typ, payload string
		if _, err := pgx.ForEachRow(rows, []any{&position, &typ, &payload}, func() error {
			p, err := domain.DecodeAccountFact(typ, []byte(payload))
			if err != nil {
				return err
			}
			balance += p.CreditsDelta
			if p.BalanceAfter != balance || balance < 0 {
				t.Errorf("%s: %s at %d: balance_after %d, sum of deltas %d", acc.id, typ, position, p.BalanceAfter, balance)
			}
			switch typ {
			case "CreditsPurchased":
				purchased += p.CreditsDelta
			case "RequestCharged", "RequestDeduplicated":
				charged -= p.CreditsDelta
				ev := &event{op: string(p.Operation), paid: p.Paid, credits: -p.CreditsDelta, balance: p.BalanceAfter, position: position}
				events = append(events, ev)
				for _, r := range p.Paid {
					if byResource[r] != nil {
						t.Errorf("%s: %s paid twice", acc.id, r)
					}
					byResource[r] = ev
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var row struct{ balance, charged int64 }
		if err := pool.QueryRow(ctx, `SELECT balance, charged_credits FROM accounts WHERE account_id = $1`, acc.id).Scan(&row.balance, &row.charged); err != nil {
			t.Fatal(err)
		}
		if row.balance != balance || row.charged != charged || purchased-charged != balance {
			t.Errorf("%s: account row %+v; ledger balance %d, purchased %d, charged %d", acc.id, row, balance, purchased, charged)
		}
		// The admin API of both processes says the same.
		for _, p := range procs {
			var got struct {
				Data struct {
					Balance int64 `json:"balance"`
				} `json:"data"`
			}
			_ = json.Unmarshal(mustAdmin(t, []*chaosProc{p}, http.MethodGet, "/admin/accounts/"+acc.id, "", http.StatusOK), &got)
			if got.Data.Balance != balance {
				t.Errorf("%s: %s's admin API says balance %d, the ledger %d", acc.id, p.name, got.Data.Balance, balance)
			}
		}

		dedupAnswers := 0
		var unknown []chaosAnswer
		for _, a := range answers {
			if a.account != ai {
				continue
			}
			label := fmt.Sprint(a.status, " ", a.code, " ", a.outcome)
			switch {
			case a.status == 0 && a.gaveUp:
				label = "went away"
			case a.status == 0:
				// The server is in this process: every request it was sent is answered.
				t.Errorf("%s %s: no answer", acc.id, a.path)
			}
			tally[label]++
			acc.mu.Lock()
			key := acc.keys[a.key]
			acc.mu.Unlock()
			if a.status == http.StatusOK && !key.revokedAt.IsZero() && a.started.After(key.revokedAt) {
				t.Errorf("%s %s: served with a key revoked %s before the request", acc.id, a.path, a.started.Sub(key.revokedAt))
			}
			switch {
			case a.status == 0 || a.status == http.StatusServiceUnavailable && a.outcome == "unknown":
				unknown = append(unknown, a)
			case a.status == http.StatusOK && a.used == 0:
				if len(a.served) > 0 {
					dedupAnswers++
				}
			case a.status == http.StatusOK:
				// Its charge: among the events that paid what it served, the one that paid as
				// much as it said and left the balance its header says.
				var found *event
				for _, r := range a.served {
					ev := byResource[r]
					if ev != nil && !ev.matched && ev.credits == a.used && strconv.FormatInt(ev.balance, 10) == a.header &&
						!slices.ContainsFunc(ev.paid, func(p string) bool { return !slices.Contains(a.served, p) }) {
						found = ev
						break
					}
				}
				if found == nil {
					t.Errorf("%s %s: 200, %d credits, balance %s; no charge in the ledger is it", acc.id, a.path, a.used, a.header)
					continue
				}
				found.matched = true
			case a.status == http.StatusServiceUnavailable && a.outcome == "none", a.status == http.StatusPaymentRequired,
				a.status == http.StatusForbidden:
			default:
				t.Errorf("%s %s: answered %d %s %s", acc.id, a.path, a.status, a.code, a.outcome)
			}
		}
		dedupEvents := 0
		for _, ev := range events {
			switch {
			case ev.matched:
			case len(ev.paid) == 0:
				dedupEvents++
			default:
				// Only a request whose client never learnt what happened may have made it.
				i := slices.IndexFunc(unknown, func(a chaosAnswer) bool {
					if a.resource == "" {
						return ev.op == "places.list"
					}
					return slices.Equal(ev.paid, []string{a.resource})
				})
				if i < 0 {
					t.Errorf("%s: a charge at %d paid %v (%d credits) that no answer reported", acc.id, ev.position, ev.paid, ev.credits)
					continue
				}
				unknown = slices.Delete(unknown, i, i+1)
			}
		}
		if dedupEvents < dedupAnswers || dedupEvents-dedupAnswers > len(unknown) {
			t.Errorf("%s: %d deduplicated answers, %d deduplicated events (%d answers of unknown outcome left)", acc.id, dedupAnswers, dedupEvents, len(unknown))
		}
	}
	t.Logf("%d answers: %v", len(answers), tally)

	// The read models catch up with the store, and the audit finds nothing.
	for try := 0; ; try++ {
		var behind int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM accounts a LEFT JOIN rm_balances b USING (account_id)
			WHERE b.balance IS DISTINCT FROM a.balance OR b.charged_credits IS DISTINCT FROM a.charged_credits`).Scan(&behind); err != nil {
			t.Fatal(err)
		}
		if behind == 0 {
			break
		}
		if try == 2400 {
			t.Fatalf("rm_balances never caught up: %d accounts differ", behind)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var out strings.Builder
	rep, err := audit.Run(ctx, pool, audit.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) > 0 {
		t.Errorf("audit: %d differences:\n%s", len(rep.Differences), out.String())
	}
}

// checkAdminAnswers checks what the admin API answered during the terminations: never an
// internal error, and a 503 that said nothing was written (outcome none) never hid a write —
// a purchase sent again after it is answered as new, and an account has no more keys than
// answers that may have issued one.
func checkAdminAnswers(t *testing.T, pool *pgxpool.Pool, accounts []*chaosAccount, answers []adminAnswer) {
	t.Helper()
	tally := map[string]int{}
	maybe := map[string]bool{} // purchase body or account's key path: an answer may have written
	issues := map[string]int{} // keys path: answers that may have issued a key
	for _, a := range answers {
		tally[fmt.Sprint(a.method, " ", a.status, " ", a.outcome)]++
		none := a.status == http.StatusServiceUnavailable && a.outcome == "none"
		switch {
		case a.status == http.StatusInternalServerError:
			t.Errorf("%s %s: 500 %s", a.method, a.path, a.answer)
		case strings.HasSuffix(a.path, "/purchases"):
			if a.status == http.StatusOK && !maybe[a.path+a.body] {
				t.Errorf("%s %s: answered as a payment seen before, though every earlier answer said nothing was written", a.path, a.body)
			}
			if !none {
				maybe[a.path+a.body] = true
			}
		case strings.HasSuffix(a.path, "/keys") && a.method == http.MethodPost:
			if !none {
				issues[a.path]++
			}
		}
	}
	t.Logf("admin answers: %v", tally)
	for _, acc := range accounts {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE account_id = $1`, acc.id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if may := issues["/admin/accounts/"+acc.id+"/keys"]; n > may {
			t.Errorf("%s: %d keys, but only %d answers may have issued one", acc.id, n, may)
		}
	}
}
