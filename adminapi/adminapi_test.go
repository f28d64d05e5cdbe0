package adminapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/adminapi"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

const adminToken = "test-admin-token"

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// clock is a fixed clock the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fixture struct {
	t     *testing.T
	pool  *pgxpool.Pool
	clock *clock
	srv   *httptest.Server
}

// newFixture serves the admin API on a test server; each option sets up its http.Server.
func newFixture(t *testing.T, options ...func(*http.Server)) *fixture {
	t.Helper()
	pool := pgtest.NewPool(t)
	clk := &clock{t: t0}
	store := eventstore.New(pool)
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	s := &adminapi.Server{
		Accounts: commands.Accounts{Store: store, Clock: clk.Now},
		Import:   commands.ImportCatalog{Store: store, Clock: clk.Now},
		Views:    commands.Views{Pool: pool},
		LatestDigest: func(ctx context.Context) (json.RawMessage, error) {
			return audit.LatestDigest(ctx, pool)
		},
		Token: adminToken,
		Log:   logger,
		Clock: clk.Now,
	}
	srv := httptest.NewUnstartedServer(s.Handler())
	for _, o := range options {
		o(srv.Config)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return &fixture{t: t, pool: pool, clock: clk, srv: srv}
}

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (r response) data() map[string]any {
	d, _ := r.body["data"].(map[string]any)
	return d
}

// call sends an admin request with the admin token.
func (f *fixture) call(method, path, body string) response {
	f.t.Helper()
	return f.callWith(method, path, body, "Bearer "+adminToken)
}

func (f *fixture) callWith(method, path, body, authorization string) response {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	out := response{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &out.body); err != nil {
		f.t.Fatalf("%s %s: body is not a JSON object: %v: %s", method, path, err, raw)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		f.t.Errorf("%s %s: no X-Request-Id", method, path)
	}
	return out
}

func (f *fixture) expect(r response, status int, code string) {
	f.t.Helper()
	if r.status != status {
		f.t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	if code == "" {
		return
	}
	if r.body["code"] != code {
		f.t.Fatalf("code %v, want %s: %s", r.body["code"], code, r.raw)
	}
	if msg, _ := r.body["error"].(string); msg == "" {
		f.t.Fatalf("no error message: %s", r.raw)
	}
}

func (f *fixture) openAccount(name string) string {
	f.t.Helper()
	r := f.call("POST", "/admin/accounts", `{"name":"`+name+`","email":"ops@example.com"}`)
	f.expect(r, 201, "")
	id, _ := r.data()["account_id"].(string)
	if !strings.HasPrefix(id, "acc_") {
		f.t.Fatalf("account_id %q: %s", id, r.raw)
	}
	return id
}

func (f *fixture) issueKey(accountID string) map[string]any {
	f.t.Helper()
	r := f.call("POST", "/admin/accounts/"+accountID+"/keys", "")
	f.expect(r, 201, "")
	return r.data()
}

func num(v any) int64 {
	n, _ := v.(float64)
	return int64(n)
}

func TestEveryRouteRefusesAMissingOrWrongAdminToken(t *testing.T) {
	f := newFixture(t)
	routes := []struct{ method, path, body string }{
		{"POST", "/admin/accounts", `{"name":"A","email":"a@example.com"}`},
		{"GET", "/admin/accounts/acc_x", ""},
		{"POST", "/admin/accounts/acc_x/keys", ""},
		{"POST", "/admin/accounts/acc_x/keys/key_x/revoke", ""},
		{"POST", "/admin/accounts/acc_x/purchases", `{"amount_cents":500,"payment_ref":"p"}`},
		{"PUT", "/admin/accounts/acc_x/rate-limit", `{"requests_per_minute":5}`},
		{"POST", "/admin/bonus-grants", `{"outage_id":"o","credits":1}`},
		{"GET", "/admin/accounts/acc_x/ledger", ""},
		{"GET", "/admin/accounts/acc_x/balance-at?at=2026-03-01T00:00:00Z", ""},
		{"GET", "/admin/accounts/acc_x/statement?from=2026-03-01&to=2026-03-02", ""},
		{"GET", "/admin/accounts/acc_x/ledger.csv", ""},
		{"GET", "/admin/digest", ""},
		{"POST", "/admin/catalog/import", `{"record":"town","slug":"berea","name":"Berea"}`},
		{"GET", "/admin/no-such-route", ""},
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			f.t = t
			for _, authorization := range []string{"", "Basic " + adminToken, "Bearer wrong-token", "Bearer " + adminToken + "x"} {
				r := f.callWith(rt.method, rt.path, rt.body, authorization)
				code := "invalid_api_key"
				if !strings.HasPrefix(authorization, "Bearer ") {
					code = "missing_api_key"
				}
				f.expect(r, 401, code)
				// Every 401 names the scheme to send (RFC 9110, section 11.6.1).
				if got := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer ") {
					t.Fatalf("Authorization %q: WWW-Authenticate %q, want a Bearer challenge", authorization, got)
				}
			}
		})
	}
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&n); err != nil || n != 0 {
		t.Errorf("refused calls wrote %d events (err %v)", n, err)
	}
}

func TestAnEmptyConfiguredTokenRefusesEverything(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := &adminapi.Server{Accounts: commands.Accounts{Store: eventstore.New(pool), Clock: time.Now}, Views: commands.Views{Pool: pool}, Log: logrus.New()}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	f := &fixture{t: t, pool: pool, srv: srv}
	f.expect(f.callWith("POST", "/admin/accounts", `{"name":"A","email":"a@example.com"}`, "Bearer x"), 401, "invalid_api_key")
	f.expect(f.callWith("POST", "/admin/accounts", `{"name":"A","email":"a@example.com"}`, "Bearer "), 401, "missing_api_key")
}

func TestOpenAccountAnswersItsIDAndRefusesBadBodies(t *testing.T) {
	f := newFixture(t)
	f.openAccount("Bluegrass Tours")

	// A wrong Content-Type is tolerated: operators use curl.
	req, _ := http.NewRequest("POST", f.srv.URL+"/admin/accounts", strings.NewReader(`{"name":"Plain","email":"p@example.com"}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Errorf("text/plain body: status %d, want 201", resp.StatusCode)
	}

	bad := map[string]string{
		"malformed JSON": `{"name":"A","email":`,
		"not JSON":       `name=A`,
		"unknown field":  `{"name":"A","email":"a@example.com","plan":"gold"}`,
		"missing name":   `{"email":"a@example.com"}`,
		"bad email":      `{"name":"A","email":"not an address"}`,
		"name not text":  `{"name":42,"email":"a@example.com"}`,
		"two objects":    `{"name":"A","email":"a@example.com"}{}`,
		"array":          `[]`,
		"empty body":     ``,
	}
	for name, body := range bad {
		t.Run(name, func(t *testing.T) {
			f.t = t
			f.expect(f.call("POST", "/admin/accounts", body), 400, "bad_request")
		})
	}
	f.t = t
	r := f.call("POST", "/admin/accounts", `{"name":"A","email":"a@example.com","plan":"gold"}`)
	if !strings.Contains(r.body["error"].(string), "plan") {
		t.Errorf("unknown field error does not name it: %s", r.raw)
	}
	r = f.call("POST", "/admin/accounts", `{"name":"A","email":"bad"}`)
	if !strings.HasPrefix(r.body["error"].(string), "email: ") {
		t.Errorf("validation error does not name the field: %s", r.raw)
	}

	huge := `{"name":"` + strings.Repeat("a", 2<<20) + `","email":"a@example.com"}`
	f.expect(f.call("POST", "/admin/accounts", huge), 413, "bad_request")
}

func TestIssueKeyRotatesTheActiveKeyAndGetAccountShowsBothWithoutTheSecret(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Rotating Co")

	first := f.issueKey(acc)
	secret1, _ := first["api_key"].(string)
	if !strings.HasPrefix(secret1, "svc_live_") || first["prefix"] != "svc_live_" || first["last4"] != secret1[len(secret1)-4:] {
		t.Fatalf("first key: %v", first)
	}
	if first["rotated_key_id"] != nil || first["grace_until"] != nil {
		t.Fatalf("first key reports a rotation: %v", first)
	}

	f.clock.Advance(time.Hour)
	second := f.issueKey(acc)
	secret2, _ := second["api_key"].(string)
	if second["rotated_key_id"] != first["key_id"] {
		t.Fatalf("rotated_key_id %v, want %v", second["rotated_key_id"], first["key_id"])
	}
	graceUntil := t0.Add(time.Hour + 24*time.Hour).Format(time.RFC3339)
	if second["grace_until"] != graceUntil {
		t.Fatalf("grace_until %v, want %s", second["grace_until"], graceUntil)
	}

	r := f.call("GET", "/admin/accounts/"+acc, "")
	f.expect(r, 200, "")
	if strings.Contains(r.raw, secret1) || strings.Contains(r.raw, secret2) || strings.Contains(r.raw, "api_key") {
		t.Fatalf("GET account shows a full key: %s", r.raw)
	}
	d := r.data()
	if d["account_id"] != acc || d["name"] != "Rotating Co" || d["email"] != "ops@example.com" || num(d["balance"]) != 0 ||
		d["opened_at"] != t0.Format(time.RFC3339) {
		t.Errorf("account: %s", r.raw)
	}
	keys, _ := d["keys"].([]any)
	if len(keys) != 2 {
		t.Fatalf("keys: %s", r.raw)
	}
	old, cur := keys[0].(map[string]any), keys[1].(map[string]any)
	if old["key_id"] != first["key_id"] || old["state"] != "grace" || old["grace_until"] != graceUntil ||
		old["prefix"] != "svc_live_" || old["last4"] != first["last4"] || old["issued_at"] != t0.Format(time.RFC3339) {
		t.Errorf("old key: %v", old)
	}
	if cur["key_id"] != second["key_id"] || cur["state"] != "active" || cur["grace_until"] != nil {
		t.Errorf("new key: %v", cur)
	}

	// Past its grace the old key shows as revoked, even before anything rewrites its row.
	f.clock.Advance(25 * time.Hour)
	r = f.call("GET", "/admin/accounts/"+acc, "")
	old = r.data()["keys"].([]any)[0].(map[string]any)
	if old["state"] != "revoked" {
		t.Errorf("old key after grace: %v", old)
	}

	f.expect(f.call("POST", "/admin/accounts/acc_missing/keys", ""), 404, "not_found")
	f.expect(f.call("GET", "/admin/accounts/acc_missing", ""), 404, "not_found")
}

func TestRevokeKeyRevokesAtOnceWithOrWithoutAReason(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Revoker")
	k1 := f.issueKey(acc)["key_id"].(string)

	r := f.call("POST", "/admin/accounts/"+acc+"/keys/"+k1+"/revoke", "")
	f.expect(r, 200, "")
	if d := r.data(); d["key_id"] != k1 || d["state"] != "revoked" {
		t.Errorf("revoke answer: %s", r.raw)
	}
	k2 := f.issueKey(acc)["key_id"].(string)
	f.expect(f.call("POST", "/admin/accounts/"+acc+"/keys/"+k2+"/revoke", `{"reason":"leaked in a gist"}`), 200, "")

	for _, k := range f.call("GET", "/admin/accounts/"+acc, "").data()["keys"].([]any) {
		if k.(map[string]any)["state"] != "revoked" {
			t.Errorf("key not revoked: %v", k)
		}
	}

	f.expect(f.call("POST", "/admin/accounts/"+acc+"/keys/key_missing/revoke", ""), 404, "not_found")
	f.expect(f.call("POST", "/admin/accounts/acc_missing/keys/"+k1+"/revoke", ""), 404, "not_found")
	f.expect(f.call("POST", "/admin/accounts/"+acc+"/keys/"+k1+"/revoke", `{"why":"x"}`), 400, "bad_request")
	f.expect(f.call("POST", "/admin/accounts/"+acc+"/keys/"+k1+"/revoke", `{"reason":`), 400, "bad_request")
}

func TestPurchaseAddsCreditsOncePerPaymentRef(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Buyer")
	path := "/admin/accounts/" + acc + "/purchases"

	r := f.call("POST", path, `{"amount_cents":500,"payment_ref":"pi_1"}`)
	f.expect(r, 201, "")
	if d := r.data(); num(d["credits_added"]) != 1000 || num(d["balance"]) != 1000 {
		t.Fatalf("purchase: %s", r.raw)
	}
	f.expect(f.call("POST", path, `{"amount_cents":2500000,"payment_ref":"pi_2"}`), 201, "")

	again := f.call("POST", path, `{"amount_cents":500,"payment_ref":"pi_1"}`)
	f.expect(again, 200, "")
	if d := again.data(); num(d["credits_added"]) != 1000 || num(d["balance"]) != 1000 {
		t.Errorf("replay does not give the first answer: %s", again.raw)
	}
	if b := num(f.call("GET", "/admin/accounts/"+acc, "").data()["balance"]); b != 5_001_000 {
		t.Errorf("balance %d, want 5001000", b)
	}

	bad := map[string]string{
		"amount 499":         `{"amount_cents":499,"payment_ref":"pi_3"}`,
		"amount 2500001":     `{"amount_cents":2500001,"payment_ref":"pi_3"}`,
		"fractional amount":  `{"amount_cents":1.5,"payment_ref":"pi_3"}`,
		"amount as a string": `{"amount_cents":"500","payment_ref":"pi_3"}`,
		"exponent amount":    `{"amount_cents":5e2,"payment_ref":"pi_3"}`,
		"missing amount":     `{"payment_ref":"pi_3"}`,
		"missing ref":        `{"amount_cents":500}`,
		"unknown field":      `{"amount_cents":500,"payment_ref":"pi_3","currency":"USD"}`,
		"bad JSON":           `{"amount_cents":500,`,
	}
	for name, body := range bad {
		t.Run(name, func(t *testing.T) {
			f.t = t
			f.expect(f.call("POST", path, body), 400, "bad_request")
		})
	}
	f.t = t
	f.expect(f.call("POST", "/admin/accounts/acc_missing/purchases", `{"amount_cents":500,"payment_ref":"pi_9"}`), 404, "not_found")

	other := f.openAccount("Other")
	f.expect(f.call("POST", "/admin/accounts/"+other+"/purchases", `{"amount_cents":500,"payment_ref":"pi_1"}`), 400, "bad_request")

	totals := f.call("GET", "/admin/accounts/"+acc, "").data()["totals"].(map[string]any)
	if num(totals["purchased_credits"]) != 5_001_000 || num(totals["bonus_credits"]) != 0 || num(totals["charged_credits"]) != 0 ||
		num(totals["requests_charged"]) != 0 || num(totals["requests_deduplicated"]) != 0 {
		t.Errorf("totals: %v", totals)
	}
}

// Any outage id the grant accepts can be followed: one holding "/" or "%" is sent escaped
// in the path (%2F, %25), as url.PathEscape writes it, and found.
func TestAGrantIsFoundByItsOutageIdEscapedInThePath(t *testing.T) {
	f := newFixture(t)
	f.issueKey(f.openAccount("A"))
	for _, id := range []string{"2026/11/db-outage", "50%off", "a b"} {
		body, _ := json.Marshal(map[string]any{"outage_id": id, "credits": 1})
		f.expect(f.call("POST", "/admin/bonus-grants", string(body)), 201, "")
		r := f.call("GET", "/admin/bonus-grants/"+url.PathEscape(id), "")
		f.expect(r, 200, "")
		if got := r.data()["outage_id"]; got != id {
			t.Errorf("GET of grant %q: outage_id %v", id, got)
		}
	}
	f.expect(f.call("GET", "/admin/bonus-grants/"+url.PathEscape("2026/11/other"), ""), 404, "not_found")
}

// An outage id is read back in a path (GET /admin/bonus-grants/{outageId}), written as
// url.PathEscape and encodeURIComponent write it, which leave "." and ".." as they are: a path
// ending in such a segment is cleaned into another path before it reaches any route (the
// admin address's ServeMux redirects it, "/admin/bonus-grants/.." to "/admin"), so a grant
// under one could never be read back. Each is refused before anything is granted; "..." is
// an ordinary segment and works.
func TestAnOutageIdThatIsADotSegmentIsRefusedBeforeAnythingIsGranted(t *testing.T) {
	f := newFixture(t)
	f.issueKey(f.openAccount("A"))
	for _, id := range []string{".", ".."} {
		body, _ := json.Marshal(map[string]any{"outage_id": id, "credits": 1})
		expectRefused(f, f.call("POST", "/admin/bonus-grants", string(body)), "outage_id")
	}
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM bonus_grants`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d grants recorded (err %v), want none", n, err)
	}
	body, _ := json.Marshal(map[string]any{"outage_id": "...", "credits": 1})
	f.expect(f.call("POST", "/admin/bonus-grants", string(body)), 201, "")
	r := f.call("GET", "/admin/bonus-grants/"+url.PathEscape("..."), "")
	f.expect(r, 200, "")
	if got := r.data()["outage_id"]; got != "..." {
		t.Errorf("GET of grant \"...\": outage_id %v", got)
	}
}

func TestBonusGrantCreditsEveryAccountWithAKeyOncePerOutage(t *testing.T) {
	f := newFixture(t)
	withKey, rotated, noKey := f.openAccount("A"), f.openAccount("B"), f.openAccount("C")
	f.issueKey(withKey)
	f.issueKey(rotated)
	f.issueKey(rotated)

	r := f.call("POST", "/admin/bonus-grants", `{"outage_id":"out-2026-03-01","credits":250,"reason":"API down 40 minutes"}`)
	f.expect(r, 201, "")
	if d := r.data(); d["outage_id"] != "out-2026-03-01" || num(d["credits"]) != 250 || num(d["accounts"]) != 2 {
		t.Fatalf("grant: %s", r.raw)
	}
	again := f.call("POST", "/admin/bonus-grants", `{"outage_id":"out-2026-03-01","credits":250,"reason":"API down 40 minutes"}`)
	f.expect(again, 200, "")
	if again.raw != r.raw {
		t.Errorf("replay %s, want %s", again.raw, r.raw)
	}
	for acc, want := range map[string]int64{withKey: 250, rotated: 250, noKey: 0} {
		d := f.call("GET", "/admin/accounts/"+acc, "").data()
		if num(d["balance"]) != want || num(d["totals"].(map[string]any)["bonus_credits"]) != want {
			t.Errorf("account %s: %v, want balance %d", acc, d, want)
		}
	}

	for name, body := range map[string]string{
		"missing outage":      `{"credits":250}`,
		"zero credits":        `{"outage_id":"o2","credits":0}`,
		"fractional credits":  `{"outage_id":"o2","credits":2.5}`,
		"credits as a string": `{"outage_id":"o2","credits":"250"}`,
		"unknown field":       `{"outage_id":"o2","credits":250,"accounts":["x"]}`,
		"bad JSON":            `{"outage_id":`,
	} {
		t.Run(name, func(t *testing.T) {
			f.t = t
			f.expect(f.call("POST", "/admin/bonus-grants", body), 400, "bad_request")
		})
	}
}

// history opens an account and gives it a key and two purchases an hour apart each:
// balances 0 (t0), 0 (t0+1h), 1000 (t0+2h), 3000 (t0+3h).
func (f *fixture) history() string {
	f.t.Helper()
	acc := f.openAccount("Historian")
	f.clock.Advance(time.Hour)
	f.issueKey(acc)
	f.clock.Advance(time.Hour)
	f.expect(f.call("POST", "/admin/accounts/"+acc+"/purchases", `{"amount_cents":500,"payment_ref":"h1"}`), 201, "")
	f.clock.Advance(time.Hour)
	f.expect(f.call("POST", "/admin/accounts/"+acc+"/purchases", `{"amount_cents":1000,"payment_ref":"h2"}`), 201, "")
	return acc
}

func TestBalanceAtReconstructsTheBalanceAtAnInstant(t *testing.T) {
	f := newFixture(t)
	acc := f.history()
	path := "/admin/accounts/" + acc + "/balance-at?at="
	cases := []struct {
		at   string
		want int64
	}{
		{t0.Add(-time.Second).Format(time.RFC3339), 0},
		{t0.Format(time.RFC3339), 0},
		{t0.Add(2*time.Hour - time.Nanosecond).Format(time.RFC3339Nano), 0},
		{t0.Add(2 * time.Hour).Format(time.RFC3339), 1000},
		{t0.Add(150 * time.Minute).Format(time.RFC3339), 1000},
		{"2026-03-01T15:00:00%2B00:00", 3000},
		{"2026-03-01T16:00:00+01:00", 3000}, // an unencoded + arrives as a space
		{"2026-03-01T13:59:59-00:00", 0},
		{"2027-01-01T00:00:00Z", 3000},
	}
	for _, c := range cases {
		r := f.call("GET", path+c.at, "")
		f.expect(r, 200, "")
		if d := r.data(); num(d["balance"]) != c.want || d["account_id"] != acc {
			t.Errorf("at %s: %s, want balance %d", c.at, r.raw, c.want)
		}
	}
	if at := f.call("GET", path+"2026-03-01T14:00:00Z", "").data()["at"]; at != "2026-03-01T14:00:00Z" {
		t.Errorf("at echoed as %v", at)
	}
	for _, bad := range []string{"", "yesterday", "2026-03-01", "2026-03-01T14:00:00", "1700000000"} {
		f.expect(f.call("GET", "/admin/accounts/"+acc+"/balance-at?at="+bad, ""), 400, "bad_request")
	}
	f.expect(f.call("GET", "/admin/accounts/"+acc+"/balance-at", ""), 400, "bad_request")
	f.expect(f.call("GET", "/admin/accounts/acc_missing/balance-at?at=2026-03-01T14:00:00Z", ""), 404, "not_found")
}

// time.Parse takes instants an answer cannot carry: a UTC year past 9999 or before 0000 (the
// JSON of a time has four digits), and offsets of ±24:00 or minutes of 60, which RFC 3339
// does not have. Each
// is a 400 with its reason, not a 200 with an empty body.
func TestBalanceAtRefusesInstantsItCouldNotEchoWithAReason(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Edge")
	path := "/admin/accounts/" + acc + "/balance-at?at="
	for _, bad := range []string{"9999-12-31T23:00:00-05:00", "0000-01-01T00:30:00%2B01:00",
		"2026-03-01T14:00:00%2B24:00", "2026-03-01T14:00:00-24:00", "2026-03-01T14:00:00%2B05:60"} {
		r := f.call("GET", path+bad, "")
		f.expect(r, 400, "bad_request")
		if msg, _ := r.body["error"].(string); !strings.HasPrefix(msg, "at: ") {
			t.Errorf("at=%s: error %q does not say what is wrong with at", bad, msg)
		}
	}
	// The last instants that can be echoed are answered.
	for _, good := range []string{"9999-12-31T23:59:59.999999Z", "0000-01-01T00:00:00Z", "2026-03-01T14:00:00%2B23:59"} {
		f.expect(f.call("GET", path+good, ""), 200, "")
	}
}

func TestLedgerListsTheAccountFactsInOrderAndPages(t *testing.T) {
	f := newFixture(t)
	acc := f.history()
	f.openAccount("Someone Else") // its facts must not show

	r := f.call("GET", "/admin/accounts/"+acc+"/ledger", "")
	f.expect(r, 200, "")
	rows, _ := r.body["data"].([]any)
	want := []struct {
		typ     string
		delta   int64
		balance int64
		at      time.Time
	}{
		{"AccountOpened", 0, 0, t0},
		{"KeyIssued", 0, 0, t0.Add(time.Hour)},
		{"CreditsPurchased", 1000, 1000, t0.Add(2 * time.Hour)},
		{"CreditsPurchased", 2000, 3000, t0.Add(3 * time.Hour)},
	}
	if len(rows) != len(want) {
		t.Fatalf("ledger rows: %s", r.raw)
	}
	var prev int64
	for i, w := range want {
		row := rows[i].(map[string]any)
		if row["type"] != w.typ || num(row["credits_delta"]) != w.delta || num(row["balance_after"]) != w.balance ||
			num(row["version"]) != int64(i+1) || row["recorded_at"] != w.at.Format(time.RFC3339) {
			t.Errorf("row %d: %v, want %+v", i, row, w)
		}
		if pos := num(row["position"]); pos <= prev {
			t.Errorf("row %d: position %d after %d", i, pos, prev)
		} else {
			prev = pos
		}
		if _, ok := row["payload"].(map[string]any); !ok {
			t.Errorf("row %d: payload %v", i, row["payload"])
		}
	}
	if strings.Contains(r.raw, "key_hash") {
		t.Errorf("ledger shows a key hash: %s", r.raw)
	}
	if num(r.body["next_after"]) != prev {
		t.Errorf("next_after %v, want %d", r.body["next_after"], prev)
	}

	// Paging: two rows, then the rest after the last one seen.
	page1 := f.call("GET", "/admin/accounts/"+acc+"/ledger?limit=2", "")
	f.expect(page1, 200, "")
	if len(page1.body["data"].([]any)) != 2 {
		t.Fatalf("page 1: %s", page1.raw)
	}
	after := int64(page1.body["next_after"].(float64))
	page2 := f.call("GET", "/admin/accounts/"+acc+"/ledger?limit=2&after="+jsonNumber(after), "")
	rows2 := page2.body["data"].([]any)
	if len(rows2) != 2 || rows2[0].(map[string]any)["type"] != "CreditsPurchased" {
		t.Fatalf("page 2: %s", page2.raw)
	}
	end := f.call("GET", "/admin/accounts/"+acc+"/ledger?after="+jsonNumber(prev), "")
	f.expect(end, 200, "")
	if !bytes.Contains([]byte(end.raw), []byte(`"data":[]`)) || end.body["next_after"] != nil {
		t.Errorf("past the end: %s", end.raw)
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=abc", "limit=1.5", "after=-1", "after=x"} {
		f.expect(f.call("GET", "/admin/accounts/"+acc+"/ledger?"+q, ""), 400, "bad_request")
	}
	f.expect(f.call("GET", "/admin/accounts/acc_missing/ledger", ""), 404, "not_found")
}

func jsonNumber(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestCatalogImportCountsRecordsAndRefusesABadLine(t *testing.T) {
	f := newFixture(t)
	good := strings.Join([]string{
		`{"record":"town","slug":"berea","name":"Berea","county":"Madison","population":15539}`,
		`{"record":"place","place_id":"plc_1","name":"Joe's Diner","category":"food.restaurant.diner","town_slug":"berea","latitude":37.57,"longitude":-84.29}`,
		`{"record":"event","event_id":"evt_1","title":"Berea Craft Festival","event_type":"festival","start_date":"2026-12-01T15:00:00Z","town_slug":"berea"}`,
	}, "\n")
	r := f.call("POST", "/admin/catalog/import", good)
	f.expect(r, 200, "")
	if d := r.data(); num(d["towns"]) != 1 || num(d["places"]) != 1 || num(d["events"]) != 1 {
		t.Fatalf("import: %s", r.raw)
	}

	var before int
	_ = f.pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&before)
	bad := `{"record":"town","slug":"paris","name":"Paris"}` + "\n" + `{"record":"place","place_id":"plc_2","category":"food"}`
	r = f.call("POST", "/admin/catalog/import", bad)
	f.expect(r, 400, "bad_request")
	if !strings.Contains(r.body["error"].(string), "line 2") {
		t.Errorf("import error does not name the line: %s", r.raw)
	}
	var after int
	_ = f.pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&after)
	if after != before {
		t.Errorf("a refused batch wrote %d events", after-before)
	}
}

func TestUnknownRoutesAndWrongMethodsAnswerWithAnErrorBody(t *testing.T) {
	f := newFixture(t)
	f.expect(f.call("GET", "/admin/nothing-here", ""), 404, "not_found")
	f.expect(f.call("GET", "/", ""), 404, "not_found")
	// A 405 says which methods the route answers, as the read API's do.
	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/admin/accounts", "POST"},
		{"GET", "/admin/bonus-grants", "POST"},
		{"DELETE", "/admin/accounts/acc_x", "GET"},
		{"POST", "/admin/accounts/acc_x/rate-limit", "PUT"},
		{"GET", "/admin/bonus-grants/a%2Fb", ""}, // a GET route: no 405
		{"PUT", "/admin/bonus-grants/a%2Fb", "GET"},
		{"GET", "/admin/catalog/import", "POST"},
	} {
		r := f.call(c.method, c.path, "")
		if c.allow == "" {
			if r.status == 405 {
				t.Errorf("%s %s: 405: %s", c.method, c.path, r.raw)
			}
			continue
		}
		f.expect(r, 405, "bad_request")
		if got := r.header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}

// A grant, once asked for, runs to its end in the process that took it, even when the caller
// goes away (or the admin listener's 30 s write timeout cuts the answer) after its first chunk:
// the 201 may be lost, the grant is not left half done.
func TestABonusGrantGoesOnWhenItsCallerGoesAway(t *testing.T) {
	bg := context.Background()
	pool := pgtest.NewPool(t)
	clk := &clock{t: t0}
	store := eventstore.New(pool)
	accounts := commands.Accounts{Store: store, Clock: clk.Now}
	const n = 450 // three chunks
	for i := range n {
		id, err := accounts.OpenAccount(bg, fmt.Sprintf("Co %d", i), fmt.Sprintf("ops%d@test.example", i), eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := accounts.IssueKey(bg, id, eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	reqCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	accounts.GrantProgress = func(commands.BonusGrant) { cancel() } // the caller leaves after the first chunk
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	h := (&adminapi.Server{Accounts: accounts, Views: commands.Views{Pool: pool}, Token: adminToken, Log: logger, Clock: clk.Now}).Handler()
	req := httptest.NewRequest(http.MethodPost, "/admin/bonus-grants", strings.NewReader(`{"outage_id":"o-leave","credits":7}`)).WithContext(reqCtx)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(httptest.NewRecorder(), req)

	var state string
	var credited, bonus int64
	if err := pool.QueryRow(bg, `SELECT state, accounts, (SELECT sum(bonus_credits) FROM accounts) FROM bonus_grants WHERE outage_id = 'o-leave'`).
		Scan(&state, &credited, &bonus); err != nil {
		t.Fatal(err)
	}
	if state != "done" || credited != n || bonus != 7*n {
		t.Fatalf("grant %s, %d accounts credited, %d bonus credits in all; want done, %d, %d", state, credited, bonus, n, 7*n)
	}
}

// The grace_until a rotation answers is the instant the key's grace ends: the one GET
// /admin/accounts/{id} shows, the one its KeyIssued fact records and the one every process
// applies, even with a clock finer than PostgreSQL's microseconds (time.Now on Linux).
func TestARotationAnswersTheGraceUntilItRecordsStoresAndShows(t *testing.T) {
	f := newFixture(t)
	f.clock.Advance(123456789 * time.Nanosecond) // 12:00:00.123456789
	acc := f.openAccount("Nanos Co")
	first := f.issueKey(acc)
	f.clock.Advance(time.Hour)
	second := f.issueKey(acc)
	if second["rotated_key_id"] != first["key_id"] {
		t.Fatalf("rotation: %v", second)
	}
	answered := second["grace_until"]

	r := f.call("GET", "/admin/accounts/"+acc, "")
	f.expect(r, 200, "")
	var shown any
	for _, k := range r.data()["keys"].([]any) {
		if k := k.(map[string]any); k["key_id"] == first["key_id"] {
			shown = k["grace_until"]
		}
	}
	var recorded any
	l := f.call("GET", "/admin/accounts/"+acc+"/ledger", "")
	for _, e := range l.body["data"].([]any) {
		if e := e.(map[string]any); e["type"] == "KeyIssued" && e["payload"].(map[string]any)["rotated_key_id"] == first["key_id"] {
			recorded = e["payload"].(map[string]any)["grace_until"]
		}
	}
	if answered == nil || answered != shown || answered != recorded {
		t.Errorf("grace_until answered by the rotation %v, shown by GET account %v, recorded in the KeyIssued fact %v", answered, shown, recorded)
	}
}
