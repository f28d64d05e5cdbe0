package console_test

import (
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// openAccountViaAdmin opens an account through the admin API and returns its id.
func openAccountViaAdmin(t *testing.T, svc *apptest.Service, name, email string) string {
	t.Helper()
	status, body := svc.Admin(t, http.MethodPost, "/admin/accounts", `{"name":`+jsonString(name)+`,"email":`+jsonString(email)+`}`)
	var opened struct {
		Data struct {
			AccountID string `json:"account_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &opened); err != nil || status != http.StatusCreated || opened.Data.AccountID == "" {
		t.Fatalf("open account: %d %s", status, body)
	}
	return opened.Data.AccountID
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// balanceViaAdmin reads the balance through the admin API.
func balanceViaAdmin(t *testing.T, svc *apptest.Service, id string) int64 {
	t.Helper()
	status, body := svc.Admin(t, http.MethodGet, "/admin/accounts/"+id, "")
	var acct struct {
		Data struct {
			Balance int64 `json:"balance"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &acct); err != nil || status != http.StatusOK {
		t.Fatalf("get account: %d %s", status, body)
	}
	return acct.Data.Balance
}

// signedInConsole signs a client in to the console of a running service and returns the client
// and the session's CSRF token.
func signedInConsole(t *testing.T, svc *apptest.Service) (*http.Client, string) {
	t.Helper()
	srvClient := &http.Client{}
	jarClient := newClientFor(t, srvClient)
	resp, _ := signIn(t, jarClient, svc.AdminURL, apptest.AdminToken)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("console sign-in: %d", resp.StatusCode)
	}
	resp, err := jarClient.Get(svc.AdminURL + "/console/accounts")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the accounts page: %d %s", resp.StatusCode, body)
	}
	return jarClient, m[1]
}

func newClientFor(t *testing.T, c *http.Client) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

var hiddenField = func(name string) *regexp.Regexp {
	return regexp.MustCompile(`name="` + regexp.QuoteMeta(name) + `" value="([^"]*)"`)
}

// A payment reference already recorded is refused at the purchase's review, naming what was
// recorded under it: the admin API would answer such a purchase as the replay of the first,
// 200 and nothing added, and the operator must not be told that $100 was recorded when
// nothing was. A confirm form sent twice (or the reference used meanwhile) says the same.
func TestAPurchaseUnderAReferenceAlreadyRecordedIsRefusedAndSaysWhy(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Reuse Co", "reuse@example.com")
	if st, b := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/purchases", `{"amount_cents":500,"payment_ref":"pay-1"}`); st != http.StatusCreated {
		t.Fatalf("first purchase: %d %s", st, b)
	}
	before := balanceViaAdmin(t, svc, id)
	c, csrf := signedInConsole(t, svc)

	resp, err := c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/purchases/review",
		url.Values{"csrf": {csrf}, "dollars": {"100"}, "payment_ref": {"pay-1"}})
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	if resp.StatusCode != http.StatusBadRequest || hiddenField("amount_cents").MatchString(page) ||
		!strings.Contains(page, "already recorded") || !strings.Contains(page, "5.00") {
		t.Errorf("review of $100 under a reference recorded for $5: %d, want 400 saying what was recorded and no confirm form:\n%s", resp.StatusCode, page)
	}

	// A confirm form for a new reference, sent twice: the first records, the second says so.
	resp, err = c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/purchases/review",
		url.Values{"csrf": {csrf}, "dollars": {"100"}, "payment_ref": {"pay-2"}})
	if err != nil {
		t.Fatal(err)
	}
	review := readAll(t, resp)
	cents, ref := hiddenField("amount_cents").FindStringSubmatch(review), hiddenField("payment_ref").FindStringSubmatch(review)
	if cents == nil || ref == nil {
		t.Fatalf("no confirm form for a new reference: %d %s", resp.StatusCode, review)
	}
	confirm := url.Values{"csrf": {csrf}, "amount_cents": {cents[1]}, "payment_ref": {ref[1]}}
	if resp, err = c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/purchases", confirm); err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("first confirm: %d", resp.StatusCode)
	}
	if resp, err = c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/purchases", confirm); err != nil {
		t.Fatal(err)
	}
	if again := readAll(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(again, "already recorded") {
		t.Errorf("the same confirm sent again: %d, want 400 saying the reference is already recorded:\n%s", resp.StatusCode, again)
	}
	if got := balanceViaAdmin(t, svc, id); got != before+20000 {
		t.Errorf("balance %d, want %d: one $100 purchase", got, before+20000)
	}
}
