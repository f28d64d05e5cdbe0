package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/console"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/apptest"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A bonus reason is at most 500 bytes; the form allows 500 characters. The review refuses what
// the admin API refuses, keeping the form, before it shows a grant to confirm; so does the
// confirm itself.
func TestABonusReasonTheAPIRefusesIsRefusedAtReviewKeepingTheForm(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Reach Co", "reach@example.com")
	issueViaAdmin(t, svc, id)
	reason := strings.Repeat("é", 300)
	if n := utf8.RuneCountInString(reason); n > 500 || len(reason) <= 500 {
		t.Fatalf("the reason must fit the form's maxlength (%d characters) and exceed 500 bytes (%d)", n, len(reason))
	}
	st, body := svc.Admin(t, http.MethodPost, "/admin/bonus-grants", `{"outage_id":"out-long","credits":10,"reason":`+jsonString(reason)+`}`)
	if st != http.StatusBadRequest {
		t.Fatalf("admin API, a 600-byte reason: %d %s; want 400", st, body)
	}
	refused := adminError(t, body)
	c, csrf := signedInConsole(t, svc)
	form := url.Values{"csrf": {csrf}, "outage_id": {"out-long"}, "credits": {"10"}, "reason": {reason}}
	for _, path := range []string{"/console/bonus-grants/review", "/console/bonus-grants"} {
		resp, err := c.PostForm(svc.AdminURL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		page := readAll(t, resp)
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(page, `id="confirm-bonus"`) ||
			!strings.Contains(page, html.EscapeString(refused)) || !strings.Contains(page, `value="out-long"`) {
			t.Errorf("POST %s with a 600-byte reason: %d (confirm button shown: %v, outage id kept: %v), want 400 saying %q",
				path, resp.StatusCode, strings.Contains(page, `id="confirm-bonus"`), strings.Contains(page, `value="out-long"`), refused)
		}
	}
}

// A refused revoke comes back to the revoke form with the reason typed; a reason that is not
// UTF-8 is refused, as the admin API refuses it, not recorded altered.
func TestARevokeReasonTheAPIRefusesComesBackToTheRevokeForm(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Revoke Co", "revoke@example.com")
	keyID, _ := issueViaAdmin(t, svc, id)
	c, csrf := signedInConsole(t, svc)
	for _, reason := range []string{strings.Repeat("é", 300), "fraud \xff\xfe"} {
		resp, err := c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/keys/"+keyID+"/revoke", url.Values{"csrf": {csrf}, "reason": {reason}})
		if err != nil {
			t.Fatal(err)
		}
		page := readAll(t, resp)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("revoke with the reason %q: %d, want 400", reason, resp.StatusCode)
		}
		if !strings.Contains(page, `id="confirm-revoke"`) || (utf8.ValidString(reason) && !strings.Contains(page, html.EscapeString(reason))) {
			t.Errorf("a refused revoke (reason %q) shows neither the revoke form nor the reason typed", reason)
		}
	}
	if _, ledger := svc.Admin(t, http.MethodGet, "/admin/accounts/"+id+"/ledger", ""); strings.Contains(ledger, `"KeyRevoked"`) {
		t.Errorf("a refused revoke was recorded: %s", ledger)
	}
}

// A grant confirmed after the same outage was granted meanwhile adds nothing; the console says so.
func TestABonusConfirmAfterTheOutageWasGrantedMeanwhileSaysNothingWasGranted(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Bonus Co", "bonus@example.com")
	issueViaAdmin(t, svc, id)
	c, csrf := signedInConsole(t, svc)
	form := confirmBonusForm(t, c, svc, csrf, "out-1", "100")
	if st, b := svc.Admin(t, http.MethodPost, "/admin/bonus-grants", `{"outage_id":"out-1","credits":5,"reason":"theirs"}`); st != http.StatusCreated {
		t.Fatalf("admin grant: %d %s", st, b)
	}
	before := balanceViaAdmin(t, svc, id)
	resp, err := c.PostForm(svc.AdminURL+"/console/bonus-grants", form)
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	if got := balanceViaAdmin(t, svc, id); got != before {
		t.Fatalf("balance moved %d -> %d", before, got)
	}
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(page, `id="grant-result"`) || !strings.Contains(page, "this form granted nothing") {
		t.Errorf("a confirm that granted nothing: %d; want 400 saying so, no grant result", resp.StatusCode)
	}
}

// The same holds when the outage's grant, asked for first elsewhere, is still running when the
// form is confirmed: the confirm helps finish that grant but adds nothing of its own (its
// credits are not used), and the console says so rather than show the grant as the form's.
func TestABonusConfirmWhileTheOutagesGrantRunsSaysNothingWasGranted(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Running Co", "running@example.com")
	issueViaAdmin(t, svc, id)
	c, csrf := signedInConsole(t, svc)
	form := confirmBonusForm(t, c, svc, csrf, "out-run", "500")

	// The account's row is held, so the admin API's grant stays running.
	ctx := context.Background()
	db, err := pgx.Connect(ctx, svc.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	hold, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	admin := make(chan string, 1)
	go func() {
		st, b := svc.Admin(t, http.MethodPost, "/admin/bonus-grants", `{"outage_id":"out-run","credits":10,"reason":"theirs"}`)
		admin <- fmt.Sprint(st, " ", b)
	}()
	lockWaiters := func() (n int) {
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
	for lockWaiters() < 1 { // the admin API's grant is recorded and waits for the account
		time.Sleep(10 * time.Millisecond)
	}
	confirmed := make(chan *http.Response, 1)
	go func() {
		resp, err := c.PostForm(svc.AdminURL+"/console/bonus-grants", form)
		if err != nil {
			t.Error(err)
		}
		confirmed <- resp
	}()
	for lockWaiters() < 2 { // the confirm joins the running grant and waits for it
		time.Sleep(10 * time.Millisecond)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-admin; !strings.HasPrefix(a, "201 ") {
		t.Fatalf("admin grant: %s", a)
	}
	resp := <-confirmed
	if resp == nil {
		t.FailNow()
	}
	page := readAll(t, resp)
	if got := balanceViaAdmin(t, svc, id); got != 10 {
		t.Errorf("balance %d, want the first grant's 10", got)
	}
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(page, `id="grant-result"`) || !strings.Contains(page, "this form granted nothing") {
		t.Errorf("a confirm that joined the running grant: %d (grant result shown: %v); want 400 saying this form granted nothing",
			resp.StatusCode, strings.Contains(page, `id="grant-result"`))
	}
}

// A 500 on the purchase confirm is logged and shown as its request id, as every failure of ours
// is, and the account page keeps what was typed.
func TestAFailedPurchaseConfirmIsLoggedAndShowsItsRequestID(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	accounts := commands.Accounts{Store: eventstore.New(pool), Clock: time.Now}
	id, err := accounts.OpenAccount(ctx, "Boom Co", "boom@example.com", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	logger, hook := logtest.NewNullLogger()
	con := &console.Server{Accounts: accounts, Views: commands.Views{Pool: pool}, Pool: pool, Token: "tok", Log: logger}
	srv := httptest.NewServer(con.Handler())
	defer srv.Close()
	c := newClient(t, srv)
	if r, _ := signIn(t, c, srv.URL, "tok"); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", r.StatusCode)
	}
	resp, err := c.Get(srv.URL + "/console/accounts/" + id)
	if err != nil {
		t.Fatal(err)
	}
	m := csrfField.FindStringSubmatch(readAll(t, resp))
	if m == nil {
		t.Fatal("no csrf")
	}
	if _, err := pool.Exec(ctx, `CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk on fire'; END $$;
		CREATE TRIGGER boom BEFORE INSERT ON purchases FOR EACH ROW EXECUTE FUNCTION boom()`); err != nil {
		t.Fatal(err)
	}
	hook.Reset()
	resp, err = c.PostForm(srv.URL+"/console/accounts/"+id+"/purchases", url.Values{"csrf": {m[1]}, "amount_cents": {"500"}, "payment_ref": {"pay-boom"}})
	if err != nil {
		t.Fatal(err)
	}
	page, reqID := readAll(t, resp), resp.Header.Get("X-Request-Id")
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("purchase whose insert fails: %d", resp.StatusCode)
	}
	logged := false
	for _, e := range hook.AllEntries() {
		logged = logged || e.Level <= logrus.ErrorLevel
	}
	if !logged || reqID == "" || !strings.Contains(page, reqID) || !strings.Contains(page, "pay-boom") {
		t.Errorf("a 500 on the purchase confirm: logged %v; page names request id %q: %v; keeps the reference: %v",
			logged, reqID, strings.Contains(page, reqID), strings.Contains(page, "pay-boom"))
	}
}
