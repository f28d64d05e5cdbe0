package console_test

import (
	"fmt"
	"net/http"
	"net/url"
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

// A search lists at most 50 accounts. When more match, the page says so: an operator looking
// for an account in a list cut without a word takes one not listed for one that does not
// exist. When exactly 50 match, it says nothing of the kind.
func TestAnAccountSearchCutAt50SaysMoreMatch(t *testing.T) {
	svc := apptest.Start(t, 60)
	for i := range 50 {
		openAccountViaAdmin(t, svc, fmt.Sprintf("Many %02d", i), fmt.Sprintf("m%02d@many.example", i))
	}
	openAccountViaAdmin(t, svc, "Many More", "more@other.example")
	c, _ := signedInConsole(t, svc)
	search := func(q string) (status, listed int, more bool) {
		resp, err := c.Get(svc.AdminURL + "/console/accounts?q=" + url.QueryEscape(q))
		if err != nil {
			t.Fatal(err)
		}
		page := readAll(t, resp)
		return resp.StatusCode, strings.Count(page, `<a href="/console/accounts/acc_`), strings.Contains(page, `id="more-accounts"`)
	}
	if st, n, more := search("many"); st != http.StatusOK || n != 50 || !more {
		t.Errorf("a search that 51 accounts match: %d, %d listed, says more match: %v", st, n, more)
	}
	if st, n, more := search("many.example"); st != http.StatusOK || n != 50 || more {
		t.Errorf("a search that 50 accounts match: %d, %d listed, says more match: %v", st, n, more)
	}
}
