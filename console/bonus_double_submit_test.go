package console_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/apptest"
)

var hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// confirmBonusForm posts the bonus review and returns its confirm form as a browser sends it.
func confirmBonusForm(t *testing.T, c *http.Client, svc *apptest.Service, csrf, outage, credits string) url.Values {
	t.Helper()
	resp, err := c.PostForm(svc.AdminURL+"/console/bonus-grants/review",
		url.Values{"csrf": {csrf}, "outage_id": {outage}, "credits": {credits}, "reason": {"outage"}})
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	at := strings.Index(page, `id="confirm-bonus-form"`)
	if resp.StatusCode != http.StatusOK || at < 0 {
		t.Fatalf("bonus review: %d %s", resp.StatusCode, page)
	}
	form := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(page[at:], -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	return form
}

// bonusAnswer is what a confirm answered: status, and the grant result or the error shown.
func bonusAnswer(t *testing.T, resp *http.Response) (int, string) {
	t.Helper()
	page := readAll(t, resp)
	for _, id := range []string{`id="grant-result">`, `id="error">`} {
		if i := strings.Index(page, id); i >= 0 {
			return resp.StatusCode, page[i : i+strings.Index(page[i:], "</p>")]
		}
	}
	return resp.StatusCode, ""
}

// The bonus confirm form sent twice by the session (a double click, a resent form) grants once,
// and the second answer is the first one's grant: "this form granted nothing" would tell the
// operator that the grant they asked for was not made, when it was, and a grant asked again
// under another outage id would credit every account twice.
func TestABonusConfirmSentTwiceAnswersTheFirstOnesGrant(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Twice Co", "twice@example.com")
	issueViaAdmin(t, svc, id)
	c, csrf := signedInConsole(t, svc)
	form := confirmBonusForm(t, c, svc, csrf, "out-twice", "100")
	for i := range 2 {
		resp, err := c.PostForm(svc.AdminURL+"/console/bonus-grants", form)
		if err != nil {
			t.Fatal(err)
		}
		st, said := bonusAnswer(t, resp)
		if st != http.StatusOK || !strings.Contains(said, "grant-result") || !strings.Contains(said, "100 credits to 1 accounts") {
			t.Errorf("submit %d of the confirm form: %d %s; want the grant made", i+1, st, said)
		}
	}
	if b := balanceViaAdmin(t, svc, id); b != 100 {
		t.Errorf("balance %d after a confirm sent twice, want 100", b)
	}
	// Another review's form for the same outage is not this form: it granted nothing.
	other := confirmBonusForm(t, c, svc, csrf, "out-other", "100")
	other.Set("outage_id", "out-twice")
	resp, err := c.PostForm(svc.AdminURL+"/console/bonus-grants", other)
	if err != nil {
		t.Fatal(err)
	}
	if st, said := bonusAnswer(t, resp); st != http.StatusBadRequest || !strings.Contains(said, "this form granted nothing") {
		t.Errorf("another form for an outage granted before: %d %s; want 400 saying it granted nothing", st, said)
	}
	if b := balanceViaAdmin(t, svc, id); b != 100 {
		t.Errorf("balance %d, want 100", b)
	}
	// A confirm without the form's own token grants nothing.
	bare := confirmBonusForm(t, c, svc, csrf, "out-bare", "100")
	bare.Del("form")
	resp, err = c.PostForm(svc.AdminURL+"/console/bonus-grants", bare)
	if err != nil {
		t.Fatal(err)
	}
	if st, said := bonusAnswer(t, resp); st != http.StatusBadRequest || balanceViaAdmin(t, svc, id) != 100 {
		t.Errorf("a confirm without its form token: %d %s; want 400 and nothing granted", st, said)
	}
}

// A double click: the browser abandons the first request, still granting (an account it must
// credit is held), and sends the form again. The second answer is the first one's grant.
func TestABonusDoubleClickWhileTheFirstStillGrantsAnswersItsGrant(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Click Co", "click@example.com")
	issueViaAdmin(t, svc, id)
	c, csrf := signedInConsole(t, svc)
	form := confirmBonusForm(t, c, svc, csrf, "out-click", "70")

	pool, tx := lockAccount(t, svc, id)
	lockWaiters := func() (n int) {
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx1, http.MethodPost, svc.AdminURL+"/console/bonus-grants", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	for lockWaiters() < 1 { // the first grant waits for the account
		time.Sleep(5 * time.Millisecond)
	}
	second := make(chan *http.Response, 1)
	go func() {
		resp, err := c.PostForm(svc.AdminURL+"/console/bonus-grants", form)
		if err != nil {
			t.Error(err)
		}
		second <- resp
	}()
	time.Sleep(300 * time.Millisecond) // the second request has arrived
	cancel1()
	<-first
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp := <-second
	if resp == nil {
		t.FailNow()
	}
	if st, said := bonusAnswer(t, resp); st != http.StatusOK || !strings.Contains(said, "70 credits to 1 accounts") {
		t.Errorf("the second click of a double-clicked bonus confirm: %d %s; want the grant the first made", st, said)
	}
	if b := balanceViaAdmin(t, svc, id); b != 70 {
		t.Errorf("balance %d, want 70", b)
	}
}
