package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/demodata"
	"github.com/kyapi/kyapi/internal/freeport"
	"github.com/kyapi/kyapi/internal/syncbuf"
)

// Bounded waits. They only guard against a hang; no test asserts how long anything takes.
const (
	readyWait    = 90 * time.Second
	stopWait     = 30 * time.Second
	recoveryWait = 60 * time.Second
	// clientTimeout is well above the server's own limits (30 s read and write timeouts).
	clientTimeout = 90 * time.Second
)

// workDir holds what every test of this binary shares: the kyapi binary and the catalog.
var workDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kyapi-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	workDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// kyapiBinary builds cmd/kyapi once per test binary and returns its path.
func kyapiBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(file))
		binPath = filepath.Join(workDir, "kyapi")
		args := []string{"build", "-o", binPath}
		if raceBuild {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/kyapi")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/kyapi: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// noRace fails the test if out, the output of a kyapi process, holds a race detector report
// (only a binary built with -race prints one: raceBuild).
func noRace(t testing.TB, what, out string) {
	t.Helper()
	if strings.Contains(out, "WARNING: DATA RACE") {
		t.Errorf("%s: the race detector reported a data race:\n%s", what, out)
	}
}

// catalogPlace is what the tests need to know of an imported place.
type catalogPlace struct {
	ID   string `json:"place_id"`
	Town string `json:"town_slug"`
}

var (
	catalogOnce   sync.Once
	catalogPath   string
	catalogPlaces []catalogPlace
	catalogErr    error
)

// demoCatalog writes the 300-place demo catalog (NDJSON) once and returns its path and
// places, in file order.
func demoCatalog(t testing.TB) (string, []catalogPlace) {
	t.Helper()
	catalogOnce.Do(func() {
		var buf bytes.Buffer
		today := time.Now().UTC().Truncate(24 * time.Hour)
		if _, catalogErr = demodata.Write(&buf, demodata.Config{Places: 300, Today: today}); catalogErr != nil {
			return
		}
		catalogPath = filepath.Join(workDir, "catalog.ndjson")
		if catalogErr = os.WriteFile(catalogPath, buf.Bytes(), 0o644); catalogErr != nil {
			return
		}
		sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var rec struct {
				Record string `json:"record"`
				catalogPlace
			}
			if catalogErr = json.Unmarshal(sc.Bytes(), &rec); catalogErr != nil {
				return
			}
			if rec.Record == "place" {
				catalogPlaces = append(catalogPlaces, rec.catalogPlace)
			}
		}
		catalogErr = sc.Err()
	})
	if catalogErr != nil {
		t.Fatalf("demo catalog: %v", catalogErr)
	}
	return catalogPath, catalogPlaces
}

// importCatalog loads the demo catalog into the database with `kyapi import`.
func importCatalog(t testing.TB, dbURL string) []catalogPlace {
	t.Helper()
	path, places := demoCatalog(t)
	out, code := runKyapi(t, dbURL, "import", path)
	if code != 0 {
		t.Fatalf("kyapi import exited %d:\n%s", code, out)
	}
	waitEventsVisible(t, dbURL)
	return places
}

// waitEventsVisible waits until every event in the store is visible to the projections'
// gap-free reader, i.e. below the xmin of a fresh snapshot. Snapshots are cluster-wide: on
// the shared dev cluster a transaction of another test's database holds the xmin back, and
// a `serve` started meanwhile would catch up to less than the whole catalog (see the notes
// in docs/operations.md on long transactions).
func waitEventsVisible(t testing.TB, dbURL string) {
	t.Helper()
	pool := openPool(t, dbURL)
	eventually(t, recoveryWait, "imported events become visible to projections", func() error {
		var invisible int64
		err := pool.QueryRow(context.Background(),
			`SELECT count(*) FROM events WHERE transaction_id >= pg_snapshot_xmin(pg_current_snapshot())`).Scan(&invisible)
		if err == nil && invisible > 0 {
			err = fmt.Errorf("%d events at or above the snapshot xmin", invisible)
		}
		return err
	})
}

// runKyapi runs a kyapi tool command to its end and returns its output and exit status.
func runKyapi(t testing.TB, dbURL string, args ...string) (string, int) {
	t.Helper()
	return runKyapiWith(t, map[string]string{"DATABASE_URL": dbURL}, args...)
}

// runKyapiWith is runKyapi with the given environment (DATA_DIR is added).
func runKyapiWith(t testing.TB, vars map[string]string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kyapiBinary(t), args...)
	vars["DATA_DIR"] = t.TempDir()
	cmd.Env = childEnv(vars)
	out, err := cmd.CombinedOutput()
	noRace(t, "kyapi "+strings.Join(args, " "), string(out))
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("kyapi %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), 0
}

// childEnv is a minimal environment plus vars: nothing of kyapi's configuration leaks in
// from the environment the tests run in (make exports ADMIN_TOKEN, DATA_DIR, ...).
func childEnv(vars map[string]string) []string {
	var env []string
	for _, name := range []string{"PATH", "HOME", "TMPDIR", "LANG"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// freeAddr is a loopback address nobody listens on, for a process to bind later (freeport).
func freeAddr(t testing.TB) string { return freeport.Addr(t) }

// randomToken is a fresh secret for a test, e.g. an admin token.
func randomToken(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// serveConfig is the environment of one `kyapi serve` process.
type serveConfig struct {
	Name        string // for logs: "A", "B", ...
	DatabaseURL string
	DataDir     string // t.TempDir() when empty
	AdminToken  string
	// NoAdminAddr leaves ADMIN_ADDR unset, so the process uses its default.
	NoAdminAddr bool
	// Env holds further variables (RATE_LIMIT_PER_MINUTE, TLS_CERT_FILE, ...).
	Env map[string]string
	// ReadClient talks to the read API (a TLS client for an https read API).
	ReadClient *http.Client
}

// service is a running `kyapi serve` process.
type service struct {
	t        testing.TB
	cfg      serveConfig
	cmd      *exec.Cmd
	log      *syncbuf.Buffer // stdout and stderr
	ReadURL  string
	AdminURL string
	client   *http.Client
	done     chan struct{} // closed when the process has exited
	exitErr  error
}

// startServe starts `kyapi serve` and waits until its read API answers GET /healthz. The
// process is stopped when the test ends; its output is logged if the test failed.
func startServe(t testing.TB, cfg serveConfig) *service {
	t.Helper()
	s := launchServe(t, cfg)
	s.waitReady()
	return s
}

// launchServe starts `kyapi serve` without waiting for it.
func launchServe(t testing.TB, cfg serveConfig) *service {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Name == "" {
		cfg.Name = "kyapi"
	}
	readAddr := freeAddr(t)
	vars := map[string]string{
		"DATABASE_URL": cfg.DatabaseURL,
		"READ_ADDR":    readAddr,
		"DATA_DIR":     cfg.DataDir,
	}
	if cfg.AdminToken != "" {
		vars["ADMIN_TOKEN"] = cfg.AdminToken
	}
	adminAddr := "127.0.0.1:8081"
	if !cfg.NoAdminAddr {
		adminAddr = freeAddr(t)
		vars["ADMIN_ADDR"] = adminAddr
	}
	for k, v := range cfg.Env {
		vars[k] = v
	}
	readAddr = vars["READ_ADDR"]
	scheme := "http"
	if vars["TLS_CERT_FILE"] != "" {
		scheme = "https"
	}
	client := cfg.ReadClient
	if client == nil {
		client = &http.Client{Timeout: clientTimeout}
	}
	s := &service{
		t: t, cfg: cfg, log: &syncbuf.Buffer{}, client: client, done: make(chan struct{}),
		ReadURL:  scheme + "://" + readAddr,
		AdminURL: "http://" + adminAddr,
	}
	s.cmd = exec.Command(kyapiBinary(t), "serve")
	s.cmd.Env = childEnv(vars)
	s.cmd.Stdout = s.log
	s.cmd.Stderr = s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start kyapi serve %s: %v", cfg.Name, err)
	}
	go func() {
		s.exitErr = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.Stop()
		noRace(t, "kyapi serve "+cfg.Name, s.Output())
		if t.Failed() {
			t.Logf("output of kyapi serve %s:\n%s", cfg.Name, s.Output())
		}
	})
	return s
}

// waitReady polls GET /healthz until it answers 200; it fails the test with the process's
// output if the process exits or the bounded wait runs out.
func (s *service) waitReady() {
	s.t.Helper()
	deadline := time.Now().Add(readyWait)
	for {
		select {
		case <-s.done:
			s.t.Fatalf("kyapi serve %s exited before it was ready (%v):\n%s", s.cfg.Name, s.exitErr, s.Output())
		default:
		}
		resp, err := s.client.Get(s.ReadURL + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("kyapi serve %s was not ready within %v (last error %v):\n%s", s.cfg.Name, readyWait, err, s.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exited reports whether the process has ended.
func (s *service) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Output is everything the process wrote to stdout and stderr so far.
func (s *service) Output() string { return s.log.String() }

// Kill ends the process with SIGKILL: no shutdown code runs.
func (s *service) Kill() {
	s.t.Helper()
	if s.exited() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Stop ends the process with SIGTERM (graceful shutdown), then SIGKILL if it does not end
// within the bounded wait.
func (s *service) Stop() {
	if s.exited() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(stopWait):
		s.t.Errorf("kyapi serve %s did not stop within %v of SIGTERM; killing it", s.cfg.Name, stopWait)
		s.Kill()
	}
}

// response is an HTTP answer read whole.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// decode reads the body as JSON into v.
func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("status %d, body is not the expected JSON (%v): %s", r.Status, err, r.Body)
	}
}

// outcomeOf is what a 503 says of its charge (X-Charge-Outcome, with its Retry-After), as
// ", charge outcome none" or ", charge outcome unknown"; "" for any other answer.
func outcomeOf(r response) string {
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		return ""
	}
	return ", charge outcome " + r.Header.Get("X-Charge-Outcome")
}

// errorCode is the code of an error body, or "" when the body is not one.
func (r response) errorCode() string {
	var e struct {
		Error *string `json:"error"`
		Code  string  `json:"code"`
	}
	if json.Unmarshal(r.Body, &e) != nil || e.Error == nil {
		return ""
	}
	return e.Code
}

// metered is the read API's success envelope.
type metered struct {
	Data json.RawMessage `json:"data"`
	Meta struct {
		CreditsUsed      int64 `json:"credits_used"`
		CreditsRemaining int64 `json:"credits_remaining"`
		Count            *int  `json:"count"`
		Deduplicated     bool  `json:"deduplicated"`
	} `json:"meta"`
}

func do(client *http.Client, req *http.Request) (response, error) {
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// tryRead sends GET path to the read API with the bearer key ("" sends none).
func (s *service) tryRead(path, key string) (response, error) {
	req, err := http.NewRequest(http.MethodGet, s.ReadURL+path, nil)
	if err != nil {
		return response{}, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return do(s.client, req)
}

// read is tryRead that fails the test on a transport error.
func (s *service) read(path, key string) response {
	s.t.Helper()
	r, err := s.tryRead(path, key)
	if err != nil {
		s.t.Fatalf("GET %s on %s: %v", path, s.cfg.Name, err)
	}
	return r
}

// readOK is read that requires 200 and decodes the envelope.
func (s *service) readOK(path, key string) metered {
	s.t.Helper()
	r := s.read(path, key)
	if r.Status != http.StatusOK {
		s.t.Fatalf("GET %s on %s: status %d, want 200: %s", path, s.cfg.Name, r.Status, r.Body)
	}
	var m metered
	r.decode(s.t, &m)
	return m
}

// adminAs calls the admin API with the given token.
func (s *service) adminAs(token, method, path string, body any) response {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.AdminURL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	r, err := do(&http.Client{Timeout: clientTimeout}, req)
	if err != nil {
		s.t.Fatalf("%s %s on %s: %v", method, path, s.cfg.Name, err)
	}
	return r
}

// admin calls the admin API with the configured token and requires the wanted status.
func (s *service) admin(method, path string, body any, want int) response {
	s.t.Helper()
	r := s.adminAs(s.cfg.AdminToken, method, path, body)
	if r.Status != want {
		s.t.Fatalf("%s %s on %s: status %d, want %d: %s", method, path, s.cfg.Name, r.Status, want, r.Body)
	}
	return r
}

// issuedKey is the admin API's answer to issuing a key.
type issuedKey struct {
	KeyID  string `json:"key_id"`
	APIKey string `json:"api_key"`
}

// openAccount opens an account, buys cents' worth of credits and issues a key.
func (s *service) openAccount(name string, cents int) (accountID string, key issuedKey) {
	s.t.Helper()
	var opened struct {
		Data struct {
			AccountID string `json:"account_id"`
		} `json:"data"`
	}
	s.admin(http.MethodPost, "/admin/accounts", map[string]string{"name": name, "email": strings.ToLower(name) + "@example.com"}, http.StatusCreated).decode(s.t, &opened)
	accountID = opened.Data.AccountID
	s.admin(http.MethodPost, "/admin/accounts/"+accountID+"/purchases",
		map[string]any{"amount_cents": cents, "payment_ref": randomToken("pay-")}, http.StatusCreated)
	key = s.issueKey(accountID)
	return accountID, key
}

func (s *service) issueKey(accountID string) issuedKey {
	s.t.Helper()
	var issued struct {
		Data issuedKey `json:"data"`
	}
	s.admin(http.MethodPost, "/admin/accounts/"+accountID+"/keys", nil, http.StatusCreated).decode(s.t, &issued)
	if issued.Data.APIKey == "" {
		s.t.Fatal("issuing a key returned no api_key")
	}
	return issued.Data
}

// ledgerRow is one row of the admin ledger.
type ledgerRow struct {
	Position     int64  `json:"position"`
	Type         string `json:"type"`
	CreditsDelta int64  `json:"credits_delta"`
	BalanceAfter int64  `json:"balance_after"`
}

// ledger reads an account's whole ledger through the admin API, page by page.
func (s *service) ledger(accountID string) ([]ledgerRow, error) {
	var all []ledgerRow
	after := int64(0)
	for {
		var page struct {
			Data      []ledgerRow `json:"data"`
			NextAfter *int64      `json:"next_after"`
		}
		r := s.adminAs(s.cfg.AdminToken, http.MethodGet, fmt.Sprintf("/admin/accounts/%s/ledger?limit=1000&after=%d", accountID, after), nil)
		if r.Status != http.StatusOK {
			return nil, fmt.Errorf("ledger: status %d: %s", r.Status, r.Body)
		}
		if err := json.Unmarshal(r.Body, &page); err != nil {
			return nil, fmt.Errorf("ledger: %v: %s", err, r.Body)
		}
		all = append(all, page.Data...)
		if page.NextAfter == nil || len(page.Data) == 0 {
			return all, nil
		}
		after = *page.NextAfter
	}
}

// requireLedgerCaughtUp waits until the admin ledger (a projection) ends at balance.
func (s *service) requireLedgerCaughtUp(accountID string, balance int64) {
	s.t.Helper()
	eventually(s.t, recoveryWait, "the ledger projection catches up", func() error {
		rows, err := s.ledger(accountID)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return errors.New("the ledger is empty")
		}
		if last := rows[len(rows)-1]; last.BalanceAfter != balance {
			return fmt.Errorf("last ledger row (position %d, %s) has balance_after %d, the account's balance is %d",
				last.Position, last.Type, last.BalanceAfter, balance)
		}
		return nil
	})
}

// openPool opens a pool on dbURL for the test's own queries.
func openPool(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ledgerTotals checks the account in the database: accounts.balance and the sum of the
// credits_delta of its stream.
func ledgerTotals(t testing.TB, pool *pgxpool.Pool, accountID string) (balance, sumDeltas int64) {
	t.Helper()
	ctx := context.Background()
	if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE account_id = $1`, accountID).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, accountEvents+`SELECT coalesce(sum(coalesce((payload->>'d')::bigint, (payload->>'credits_delta')::bigint)), 0)::bigint FROM e`,
		"account-"+accountID).Scan(&sumDeltas); err != nil {
		t.Fatal(err)
	}
	return balance, sumDeltas
}

// accountEvents is a WITH clause naming e the events of the account stream $1. Charge events
// carry their credits delta as d (compact form), the others as credits_delta.
const accountEvents = `WITH e AS (SELECT e.* FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = $1) `

// paidEvents counts the RequestCharged events of an account that paid resource.
func paidEvents(t testing.TB, pool *pgxpool.Pool, accountID, resource string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), accountEvents+`SELECT count(*) FROM e WHERE type = 'RequestCharged'
		AND EXISTS (SELECT 1 FROM json_array_elements_text(payload->'paid') r WHERE r = $2)`, "account-"+accountID, resource).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// requireNothingPaidTwice fails the test if the account paid any resource twice on one UTC day.
func requireNothingPaidTwice(t testing.TB, pool *pgxpool.Pool, accountID string) {
	t.Helper()
	var twice int
	if err := pool.QueryRow(context.Background(), accountEvents+`SELECT count(*) FROM (
			SELECT (recorded_at AT TIME ZONE 'UTC')::date, r FROM e, json_array_elements_text(e.payload->'paid') r
			WHERE e.type = 'RequestCharged' GROUP BY 1, 2 HAVING count(*) > 1) d`, "account-"+accountID).Scan(&twice); err != nil {
		t.Fatal(err)
	}
	if twice != 0 {
		t.Errorf("%d resources were paid twice on one day", twice)
	}
}

// requireAuditClean runs `kyapi audit` and requires exit status 0. It first waits until
// every event is visible: audit catches the read models up only to the visible horizon,
// which an open transaction anywhere on the shared cluster holds back (reported bug).
func requireAuditClean(t testing.TB, dbURL string) {
	t.Helper()
	waitEventsVisible(t, dbURL)
	out, code := runKyapi(t, dbURL, "audit")
	if code != 0 {
		t.Errorf("kyapi audit exited %d, want 0:\n%s", code, out)
	}
}

// eventually retries check until it returns nil or the bounded wait runs out.
func eventually(t testing.TB, wait time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, wait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
