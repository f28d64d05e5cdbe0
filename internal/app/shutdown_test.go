package app

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// hangGuard only keeps a broken shutdown from hanging the suite; no test asserts how long
// anything takes.
const hangGuard = 2 * time.Minute

// On SIGTERM the read API stops taking requests at once, even while an admin call is still in
// flight: a stopping process takes no more paid traffic. The admin call still gets its answer.
func TestOnShutdownTheReadAPIRefusesNewRequestsWhileAnAdminCallDrains(t *testing.T) {
	setShutdownWait(t, time.Hour) // the admin call ends only when the test lets it
	s := startShutdownServe(t)
	accountID := s.openAccount(t)
	lock := s.holdAccountRow(t, accountID)
	purchase := s.purchaseInFlight(t, accountID)

	s.stop()
	eventually(t, "the read API refuses connections", func() bool { return refuses(s.addrs["read"]) })
	select {
	case r := <-purchase:
		t.Fatalf("the admin call ended before the test let go of the account's row: %+v", r)
	default:
	}

	if err := lock.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := <-purchase; r.err != nil || r.status != http.StatusCreated {
		t.Fatalf("the purchase in flight at shutdown: status %d, error %v; want 201", r.status, r.err)
	}
	if err := s.wait(t); err != nil {
		t.Fatalf("serve stopped by its context returned %v", err)
	}
}

// An admin call still busy when the shutdown's wait ends has its connection cut, so Serve
// returns and its pool closes rather than hanging on the connection that call holds; the
// call's transaction is rolled back, not half done.
func TestAnAdminCallStillBusyAtTheShutdownDeadlineIsCutAndServeReturns(t *testing.T) {
	setShutdownWait(t, 100*time.Millisecond)
	s := startShutdownServe(t)
	accountID := s.openAccount(t)
	lock := s.holdAccountRow(t, accountID)
	purchase := s.purchaseInFlight(t, accountID)

	s.stop()
	if err := s.wait(t); err != nil { // the account's row is still held
		t.Fatalf("serve stopped by its context returned %v", err)
	}
	if r := <-purchase; r.err == nil {
		t.Fatalf("the purchase cut at shutdown was answered %d", r.status)
	}
	if err := lock.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	var balance int64
	if err := s.db.QueryRow(context.Background(), `SELECT balance FROM accounts WHERE account_id = $1`, accountID).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if balance != 0 {
		t.Fatalf("balance %d after a purchase cut at shutdown, want 0", balance)
	}
}

// A bonus grant runs detached from its request (the caller going away does not stop it), but
// not from the process: one still waiting at the shutdown deadline for an account's row that
// another transaction holds ends there, so Serve returns, and the grant stays running, to be
// finished by the next start or by asking again, crediting nothing twice.
func TestAGrantStillWaitingAtTheShutdownDeadlineEndsAndServeReturns(t *testing.T) {
	setShutdownWait(t, 100*time.Millisecond)
	s := startShutdownServe(t)
	accountID := s.openAccount(t)
	if r := s.admin(http.MethodPost, "/admin/accounts/"+accountID+"/keys", ""); r.err != nil || r.status != http.StatusCreated {
		t.Fatalf("issuing a key: %+v", r) // so that the grant reaches the account
	}
	lock := s.holdAccountRow(t, accountID)
	grant := make(chan adminAnswer, 1)
	go func() {
		grant <- s.admin(http.MethodPost, "/admin/bonus-grants", `{"outage_id":"out-at-shutdown","credits":10,"reason":"r"}`)
	}()
	s.waitForLockWaiter(t)

	s.stop()
	if err := s.wait(t); err != nil { // the account's row is still held
		t.Fatalf("serve stopped by its context returned %v", err)
	}
	if r := <-grant; r.err == nil && r.status < 500 {
		t.Fatalf("the grant cut at shutdown was answered %d %s", r.status, r.body)
	}
	if err := lock.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	var state string
	var balance int64
	if err := s.db.QueryRow(context.Background(), `SELECT (SELECT state FROM bonus_grants WHERE outage_id = 'out-at-shutdown'),
		(SELECT balance FROM accounts WHERE account_id = $1)`, accountID).Scan(&state, &balance); err != nil {
		t.Fatal(err)
	}
	if state != "running" || balance != 0 {
		t.Fatalf("after the cut: grant %q, balance %d; want running and 0 (to be finished at the next start)", state, balance)
	}
}

// setShutdownWait sets how long a stopping serve waits, until the test ends.
func setShutdownWait(t *testing.T, d time.Duration) {
	was := shutdownWait
	shutdownWait = d
	t.Cleanup(func() { shutdownWait = was })
}

// shutdownServe is a Serve of the read and admin APIs run by a test.
type shutdownServe struct {
	addrs  map[string]string // api → address
	db     *pgx.Conn         // the test's own connection to the service's database
	cancel context.CancelFunc
	done   chan error
}

const shutdownTestToken = "shutdown-test-admin-token"

func startShutdownServe(t *testing.T) *shutdownServe {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	cfg := Config{DatabaseURL: dbURL, ReadAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", AdminToken: shutdownTestToken,
		DataDir: t.TempDir(), CanonicalBaseURL: "http://localhost:8080", RateLimit: 60}
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	s := &shutdownServe{addrs: map[string]string{}, cancel: cancel, done: make(chan error, 1)}
	var mu sync.Mutex
	ready := make(chan struct{})
	go func() {
		s.done <- Serve(ctx, cfg, log, Options{Read: true, Admin: true, Projections: true,
			Listening: func(api, addr string) {
				mu.Lock()
				defer mu.Unlock()
				s.addrs[api] = addr
				if len(s.addrs) == 2 {
					close(ready)
				}
			}})
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	select {
	case <-ready:
	case err := <-s.done:
		t.Fatalf("serve stopped before listening: %v", err)
	case <-time.After(hangGuard):
		t.Fatal("serve did not start listening")
	}
	r, err := http.Get("http://" + s.addrs["read"] + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("the read API's /healthz before shutdown: %d", r.StatusCode)
	}
	db, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	s.db = db
	return s
}

// stop ends the Serve's context, as SIGTERM does.
func (s *shutdownServe) stop() { s.cancel() }

// wait returns what Serve returned.
func (s *shutdownServe) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(hangGuard):
		t.Fatal("serve did not return after its context ended")
		return nil
	}
}

func (s *shutdownServe) openAccount(t *testing.T) string {
	t.Helper()
	r := s.admin(http.MethodPost, "/admin/accounts", `{"name":"Stopping","email":"stopping@example.com"}`)
	if r.err != nil || r.status != http.StatusCreated {
		t.Fatalf("opening an account: %+v", r)
	}
	var opened struct {
		Data struct {
			AccountID string `json:"account_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.body), &opened); err != nil || opened.Data.AccountID == "" {
		t.Fatalf("opening an account: %v: %s", err, r.body)
	}
	return opened.Data.AccountID
}

// holdAccountRow locks the account's row in a transaction of the test's, which any admin call
// on that account waits for; the test ends it. It is rolled back when the test ends.
func (s *shutdownServe) holdAccountRow(t *testing.T, accountID string) pgx.Tx {
	t.Helper()
	tx, err := s.db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(context.Background(), `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, accountID); err != nil {
		t.Fatal(err)
	}
	return tx
}

// purchaseInFlight posts a purchase for the account and returns once PostgreSQL shows it
// waiting for a lock (the account's row held by holdAccountRow); its answer comes on the channel.
func (s *shutdownServe) purchaseInFlight(t *testing.T, accountID string) <-chan adminAnswer {
	t.Helper()
	answer := make(chan adminAnswer, 1)
	go func() {
		answer <- s.admin(http.MethodPost, "/admin/accounts/"+accountID+"/purchases", `{"amount_cents":500,"payment_ref":"pay-at-shutdown"}`)
	}()
	s.waitForLockWaiter(t)
	return answer
}

// waitForLockWaiter returns once PostgreSQL shows a session of the database waiting for a lock.
func (s *shutdownServe) waitForLockWaiter(t *testing.T) {
	t.Helper()
	watch, err := pgx.Connect(context.Background(), s.db.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	eventually(t, "an admin call waits for the account's row", func() bool {
		var waiting int
		err := watch.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})
}

// adminAnswer is an admin call's status and body, or the error that cut it.
type adminAnswer struct {
	status int
	body   string
	err    error
}

func (s *shutdownServe) admin(method, path, body string) adminAnswer {
	req, err := http.NewRequest(method, "http://"+s.addrs["admin"]+path, strings.NewReader(body))
	if err != nil {
		return adminAnswer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+shutdownTestToken)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return adminAnswer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return adminAnswer{status: resp.StatusCode, body: string(b), err: err}
}

// refuses reports whether a new connection to addr is refused.
func refuses(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return true
	}
	_ = c.Close()
	return false
}

// eventually polls cond until it holds, failing the test if it never does.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened", what)
		}
	}
}

// An import in flight when SIGTERM comes is answered once the read models hold it, as any
// import is (docs/api.md, "Catalog import"): the projections it waits for run until the
// servers have shut down, not only until the signal.
func TestAnImportInFlightAtShutdownIsAnsweredOnceTheReadModelsHoldIt(t *testing.T) {
	setShutdownWait(t, time.Hour) // the import ends only when the test lets it
	s := startShutdownServe(t)
	town := `{"record":"town","slug":"berea","name":"Berea"}` + "\n"
	if r := s.admin(http.MethodPost, "/admin/catalog/import", town+`{"record":"place","place_id":"plc_a","name":"Before","category":"food","town_slug":"berea"}`); r.err != nil || r.status != http.StatusOK {
		t.Fatalf("first import: %+v", r)
	}
	lock, err := s.db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(context.Background()) })
	if _, err := lock.Exec(context.Background(), `SELECT 1 FROM streams WHERE stream_id = 'place-plc_a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	answer := make(chan adminAnswer, 1)
	go func() {
		answer <- s.admin(http.MethodPost, "/admin/catalog/import", `{"record":"place","place_id":"plc_a","name":"After","category":"food","town_slug":"berea"}`)
	}()
	s.waitForLockWaiter(t)

	s.stop()
	eventually(t, "the read API refuses connections", func() bool { return refuses(s.addrs["read"]) })
	if err := lock.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := <-answer
	var name string
	if err := s.db.QueryRow(context.Background(), `SELECT name FROM rm_places WHERE place_id = 'plc_a'`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if r.err != nil || r.status != http.StatusOK || name != "After" {
		t.Fatalf("the import in flight at shutdown: %+v; the catalog holds %q when it is answered, want 200 and \"After\"", r, name)
	}
	if err := s.wait(t); err != nil {
		t.Fatalf("serve stopped by its context returned %v", err)
	}
}
