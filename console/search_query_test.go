package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// The accounts search reads q strictly, as the account page reads its ledger cursor and the
// admin reads theirs (httpx.Query, docs/limits.md): a q that url.Values would drop (a ';', a
// broken %-escape) or one given twice is refused, never answered as the unfiltered list of the
// newest accounts, or as one of the two searches.
func TestAnAccountSearchWhoseQueryDoesNotParseIs400NotEveryAccount(t *testing.T) {
	svc := apptest.Start(t, 60)
	openAccountViaAdmin(t, svc, "Zebra Works", "zebra@example.com")
	other := openAccountViaAdmin(t, svc, "Other Shop", "other@example.com")
	c, _ := signedInConsole(t, svc)
	for q, want := range map[string]int{"?q=zebra": 200, "?q=zebra%3Bx": 200, "?q=zebra;x": 400, "?q=zebra%zz": 400,
		"?q=zebra&q=other": 400, "?q=zebra&q=": 400} {
		resp, err := c.Get(svc.AdminURL + "/console/accounts" + q)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", q, resp.StatusCode, want)
		}
		if strings.Contains(body, other) {
			t.Errorf("%s lists the account that does not match the search (%s): its q was dropped", q, other)
		}
	}
	// The page without q still lists every account.
	resp, err := c.Get(svc.AdminURL + "/console/accounts")
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(body, other) {
		t.Errorf("the accounts page without a search: %d, lists %s: %v", resp.StatusCode, other, strings.Contains(body, other))
	}
}
