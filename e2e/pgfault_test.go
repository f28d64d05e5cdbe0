package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgfailOutcome is one request of the load and what the client got.
type pgfailOutcome struct {
	account  string
	resource string
	path     string
	status   int // 0: no answer
	code     string
	used     int64
	dedup    bool
	body     string
	err      string
}

// runFaultUnderLoad starts a private cluster and a serve, opens accounts, runs a load of
// requests each for a resource never asked before (per account), runs fault while it runs,
// and then checks money and answers request by request.
func runFaultUnderLoad(t *testing.T, fault func(t *testing.T, c *privateCluster, dbURL string)) {
	cluster := startPrivateCluster(t)
	dbURL := cluster.createDatabase("kyapi")
	places := importCatalog(t, dbURL)
	s := startServe(t, serveConfig{Name: "pgfail", DatabaseURL: dbURL, AdminToken: randomToken("admin-"),
		Env: map[string]string{"RATE_LIMIT_PER_MINUTE": "1000000"}})
	const nAcc = 24
	type acct struct{ id, key string }
	accs := make([]acct, nAcc)
	for i := range accs {
		id, k := s.openAccount(fmt.Sprintf("Fail%d", i), 2500)
		accs[i] = acct{id, k.APIKey}
		s.readOK("/api/data/towns", k.APIKey) // warm: the meter holds the account
	}
	ops := []struct {
		path, res string
	}{{"/api/data/places/%s", "place:%s"}, {"/api/data/places/%s/reviews", "reviews:%s"}, {"/api/data/places/%s/menu", "menu:%s"}}
	total := int64(nAcc * len(places) * len(ops))

	var (
		idx  atomic.Int64
		stop atomic.Bool
		mu   sync.Mutex
		outs []pgfailOutcome
		wg   sync.WaitGroup
	)
	client := &http.Client{Timeout: clientTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := idx.Add(1) - 1
				if i >= total {
					return
				}
				a := accs[i%nAcc]
				p := places[(i/nAcc)%int64(len(places))]
				op := ops[(i/(nAcc*int64(len(places))))%int64(len(ops))]
				o := pgfailOutcome{account: a.id, resource: fmt.Sprintf(op.res, p.ID), path: fmt.Sprintf(op.path, p.ID)}
				req, _ := http.NewRequest(http.MethodGet, s.ReadURL+o.path, nil)
				req.Header.Set("Authorization", "Bearer "+a.key)
				r, err := do(client, req)
				if err != nil {
					o.err = err.Error()
				} else {
					o.status, o.code, o.body = r.Status, r.errorCode()+outcomeOf(r), string(r.Body)
					if r.Status == http.StatusOK {
						var m metered
						_ = json.Unmarshal(r.Body, &m)
						o.used, o.dedup = m.Meta.CreditsUsed, m.Meta.Deduplicated
						o.body = ""
					}
				}
				mu.Lock()
				outs = append(outs, o)
				mu.Unlock()
				time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond)
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	fault(t, cluster, dbURL)
	// After the fault: the process must serve again by itself.
	recovered := time.Now()
	eventually(t, recoveryWait, "a metered request succeeds after the fault", func() error {
		r, err := s.tryRead("/api/data/towns", accs[0].key)
		if err != nil {
			return err
		}
		if r.Status != http.StatusOK {
			return fmt.Errorf("status %d: %s", r.Status, r.Body)
		}
		return nil
	})
	t.Logf("recovered %v after the fault ended", time.Since(recovered).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // some load after recovery
	stop.Store(true)
	wg.Wait()

	// Every paid resource in the store, per account.
	pool := openPool(t, dbURL)
	paid := map[string]int{}
	rows, err := pool.Query(context.Background(), `SELECT substr(s.stream_id, 9), r FROM events e JOIN streams s USING (stream_no),
		json_array_elements_text(e.payload->'paid') r WHERE e.type = 'RequestCharged'`)
	if err != nil {
		t.Fatal(err)
	}
	var acc, res string
	_, err = pgx.ForEachRow(rows, []any{&acc, &res}, func() error { paid[acc+" "+res]++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	tally := map[string]int{}
	asked := map[string]bool{}
	violations := 0
	report := func(format string, args ...any) {
		violations++
		if violations <= 15 {
			t.Errorf(format, args...)
		}
	}
	for _, o := range outs {
		k := o.account + " " + o.resource
		asked[k] = true
		n := paid[k]
		label := fmt.Sprintf("%d %s", o.status, o.code)
		if o.status == 0 {
			label = "no answer"
		}
		tally[label]++
		switch {
		case o.status == http.StatusOK:
			if o.dedup || o.used == 0 {
				report("%s: 200 deduplicated (credits_used %d) for a resource never asked before; paid %d times", o.path, o.used, n)
			} else if n != 1 {
				report("%s: 200 with credits_used %d, but %d charge events paid it", o.path, o.used, n)
			}
		case o.status == http.StatusNotFound:
			if n != 0 {
				report("%s: 404 but paid %d times", o.path, n)
			}
		case o.status == http.StatusServiceUnavailable && o.code == "internal, charge outcome none":
			if n != 0 {
				report("%s: 503 unavailable (nothing charged) but paid %d times", o.path, n)
			}
			if !strings.HasPrefix(o.body, `{"error":"service temporarily unavailable`) {
				report("%s: 503 unavailable with body %s", o.path, o.body)
			}
		case o.status == http.StatusServiceUnavailable && o.code == "internal, charge outcome unknown":
			if n > 1 {
				report("%s: charge_outcome_unknown but paid %d times", o.path, n)
			}
		default:
			report("%s: answered %s (%s %s), not a documented answer to a database fault; paid %d times", o.path, label, o.body, o.err, n)
		}
	}
	for k, n := range paid {
		if !asked[k] && !strings.HasSuffix(k, " towns") {
			report("%s paid %d times but never asked", k, n)
		}
	}
	t.Logf("%d requests: %v", len(outs), tally)
	for _, a := range accs {
		balance, sum := ledgerTotals(t, pool, a.id)
		if balance != sum || balance < 0 {
			report("account %s: balance %d, sum of deltas %d", a.id, balance, sum)
		}
	}
	requireAuditClean(t, dbURL)
}

// An immediate shutdown closes the sockets without a word: pgx reads io.ErrUnexpectedEOF, which
// is the database gone (503 unavailable, nothing charged), not an internal error.
func TestAnImmediateShutdownOfPostgreSQLMidLoadAnswersOnly503sAndLosesNothing(t *testing.T) {
	runFaultUnderLoad(t, func(t *testing.T, c *privateCluster, dbURL string) {
		if out, err := c.pgCtl("stop", "-m", "immediate", "-w", "-t", "60"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		time.Sleep(3 * time.Second)
		c.start()
	})
}

// The database turned read-only mid-load (a failover onto a standby looks the same to a
// session: SQLSTATE 25006), then writable again.
func TestADatabaseTurnedReadOnlyMidLoadAnswers503NotInternal(t *testing.T) {
	runFaultUnderLoad(t, func(t *testing.T, c *privateCluster, dbURL string) {
		ctx := context.Background()
		admin, err := pgx.Connect(ctx, c.url("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		for _, q := range []string{`ALTER SYSTEM SET default_transaction_read_only = on`, `SELECT pg_reload_conf()`} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(6 * time.Second)
		for _, q := range []string{`ALTER SYSTEM RESET default_transaction_read_only`, `SELECT pg_reload_conf()`} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// roleSetting sets a role default for new sessions and ends the service's sessions so that
// they reconnect with it; reset undoes it.
func roleSetting(t *testing.T, c *privateCluster, set string, hold time.Duration) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, c.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	kill := `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'kyapi' AND backend_type = 'client backend'`
	for _, q := range []string{`ALTER ROLE postgres SET ` + set, kill} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(hold)
	name := strings.TrimSpace(strings.SplitN(set, "=", 2)[0])
	for _, q := range []string{`ALTER ROLE postgres RESET ` + name, kill} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// statement_timeout (SQLSTATE 57014) is a database too slow: 503 unavailable, nothing charged.
func TestAStatementTimeoutOnTheRoleMidLoadAnswers503NotInternal(t *testing.T) {
	runFaultUnderLoad(t, func(t *testing.T, c *privateCluster, dbURL string) {
		roleSetting(t, c, `statement_timeout = '3ms'`, 8*time.Second)
	})
}

// Every COMMIT waits for a synchronous standby that never comes, and the service's backends
// are ended or cancelled at that moment — committed, with the answer lost (pg_terminate_backend
// during the wait: the client gets no answer at all), or answered with a warning
// (pg_cancel_backend) — and at any other moment: holding a batch's locks, running
// kyapi_charge, idle in the pool, listening for key changes, counting the rate. Each answer
// says what happened: a charge that committed is paid, and found so rather than decided again
// (which would answer it deduplicated); "nothing charged" charged nothing.
func TestBackendsEndedAtTheMomentOfCommitMidLoadLoseNoCharge(t *testing.T) {
	runFaultUnderLoad(t, func(t *testing.T, c *privateCluster, dbURL string) {
		ctx := context.Background()
		admin, err := pgx.Connect(ctx, c.url("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		count := func(q string) int {
			var n int
			if err := admin.QueryRow(ctx, q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if _, err := admin.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = 'kyapi_test_no_standby'`); err != nil {
			t.Fatal(err)
		}
		count(`SELECT count(pg_reload_conf())`)
		service := `datname = 'kyapi' AND backend_type = 'client backend' AND pid <> pg_backend_pid()`
		rng := rand.New(rand.NewPCG(1, 2))
		ended := map[string]int{}
		for i := range 1500 {
			// The commits waiting for the standby: committed, each ended or let go.
			ended["commit waiting, terminated"] += count(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE ` + service + ` AND wait_event = 'SyncRep' AND random() < 0.5`)
			ended["commit waiting, cancelled"] += count(`SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity
				WHERE ` + service + ` AND wait_event = 'SyncRep'`)
			if i%4 == 0 {
				fn := []string{"pg_terminate_backend", "pg_cancel_backend"}[rng.IntN(2)]
				filter := []string{`true`, `state = 'idle in transaction'`, `state = 'active' AND query LIKE '%kyapi_charge%'`}[rng.IntN(3)]
				ended[fn+" "+filter] += count(`SELECT count(` + fn + `(pid)) FROM (SELECT pid FROM pg_stat_activity
					WHERE ` + service + ` AND ` + filter + ` ORDER BY random() LIMIT 1) p`)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if _, err := admin.Exec(ctx, `ALTER SYSTEM RESET synchronous_standby_names`); err != nil {
			t.Fatal(err)
		}
		count(`SELECT count(pg_reload_conf())`)
		t.Logf("ended: %v", ended)
	})
}
