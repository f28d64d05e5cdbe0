package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/apptest"
)

// consolePage GETs a console page with a signed-in client and returns its status and body.
func consolePage(t *testing.T, c *http.Client, svc *apptest.Service, path string) (int, string) {
	t.Helper()
	resp, err := c.Get(svc.AdminURL + path)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, readAll(t, resp)
}

// A key already revoked (by another operator, or by this one before the back button) is not
// offered for revoking as if it still worked: its revoke page says it is revoked, with nothing
// to confirm, rather than "It stops working at once" and a button that records nothing.
func TestTheRevokePageOfARevokedKeySaysItIsRevokedAndOffersNothing(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Gone Co", "gone@example.com")
	keyID, _ := issueViaAdmin(t, svc, id)
	c, csrf := signedInConsole(t, svc)
	path := "/console/accounts/" + id + "/keys/" + keyID + "/revoke"
	if st, page := consolePage(t, c, svc, path); st != http.StatusOK || !strings.Contains(page, `id="confirm-revoke"`) {
		t.Fatalf("revoke page of the active key: %d, confirm button %v", st, strings.Contains(page, `id="confirm-revoke"`))
	}
	resp, err := c.PostForm(svc.AdminURL+path, url.Values{"csrf": {csrf}, "reason": {"leaked"}})
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	st, page := consolePage(t, c, svc, path)
	if st != http.StatusOK || strings.Contains(page, `id="confirm-revoke"`) || strings.Contains(page, "stops working at once") ||
		!strings.Contains(page, "already revoked") {
		t.Errorf("revoke page of a revoked key: %d, confirm button %v, says it stops working at once %v, says already revoked %v",
			st, strings.Contains(page, `id="confirm-revoke"`), strings.Contains(page, "stops working at once"),
			strings.Contains(page, "already revoked"))
	}
}

// A rotation while a key is in grace revokes that key at once (decisions.md): the account page
// must say so next to the Rotate button, naming the key, as it says the active key keeps its
// grace; an operator is not to break the application still on the grace key without a word.
func TestTheRotateButtonSaysAKeyInGraceStopsAtOnce(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Grace Co", "grace@example.com")
	c, _ := signedInConsole(t, svc)
	issueViaAdmin(t, svc, id)
	_, page := consolePage(t, c, svc, "/console/accounts/"+id)
	if strings.Contains(page, "stops at once") {
		t.Fatalf("with no key in grace the page warns that one stops at once")
	}
	issueViaAdmin(t, svc, id) // the first key is now in grace
	var grace struct {
		Data struct {
			Keys []struct {
				Last4 string `json:"last4"`
				State string `json:"state"`
			} `json:"keys"`
		} `json:"data"`
	}
	st, body := svc.Admin(t, http.MethodGet, "/admin/accounts/"+id, "")
	if err := json.Unmarshal([]byte(body), &grace); err != nil || st != http.StatusOK {
		t.Fatalf("get account: %d %s", st, body)
	}
	last4 := ""
	for _, k := range grace.Data.Keys {
		if k.State == "grace" {
			last4 = k.Last4
		}
	}
	if last4 == "" {
		t.Fatalf("no key in grace after a rotation: %s", body)
	}
	_, page = consolePage(t, c, svc, "/console/accounts/"+id)
	form := page[strings.Index(page, `action="/console/accounts/`+id+`/keys"`):]
	form = form[:strings.Index(form, "</form>")]
	if !strings.Contains(form, "…"+last4) || !strings.Contains(form, "stops at once") {
		t.Errorf("the rotate form of an account with key …%s in grace does not say that key stops at once:\n%s", last4, form)
	}
}

// The account page shows when a grace ends as the admin API answers it, to the second: cut to
// the minute, a key shown "in grace" past the time shown as its grace's end contradicts itself
// for up to a minute.
func TestTheGraceEndIsShownToTheSecondAsTheAdminAPIAnswers(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Second Co", "second@example.com")
	issueViaAdmin(t, svc, id)
	issueViaAdmin(t, svc, id)
	var acct struct {
		Data struct {
			Keys []struct {
				GraceUntil *time.Time `json:"grace_until"`
			} `json:"keys"`
		} `json:"data"`
	}
	st, body := svc.Admin(t, http.MethodGet, "/admin/accounts/"+id, "")
	if err := json.Unmarshal([]byte(body), &acct); err != nil || st != http.StatusOK {
		t.Fatalf("get account: %d %s", st, body)
	}
	var until time.Time
	for _, k := range acct.Data.Keys {
		if k.GraceUntil != nil {
			until = *k.GraceUntil
		}
	}
	if until.IsZero() {
		t.Fatalf("no grace_until after a rotation: %s", body)
	}
	c, _ := signedInConsole(t, svc)
	_, page := consolePage(t, c, svc, "/console/accounts/"+id)
	if want := until.UTC().Format("2006-01-02 15:04:05 UTC"); !strings.Contains(page, want) {
		t.Errorf("the account page does not show the grace end %s (admin API: %s)", want, until.Format(time.RFC3339Nano))
	}
}
