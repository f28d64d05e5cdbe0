package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

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
