package console_test

import (
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// The account page's ledger cursor is read strictly: one that url.Values would drop (a ';', a
// broken %-escape) or one given twice is refused, never shown as the ledger's first page.
func TestAnAccountPageWithALedgerCursorThatDoesNotParseIs400(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Cursor", "c@example.com")
	c, _ := signedInConsole(t, svc)
	for q, want := range map[string]int{"": 200, "?after=0": 200, "?after=1": 200, "?after=1;": 400, "?after=1%zz": 400,
		"?after=1&after=0": 400, "?after=-1": 400, "?after=x": 400} {
		resp, err := c.Get(svc.AdminURL + "/console/accounts/" + id + q)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", q, resp.StatusCode, want)
		}
	}
}
