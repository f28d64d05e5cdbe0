package e2e

import (
	"encoding/json"
	"testing"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// decisions.md §1: "Trending: places ranked by metered requests for them (detail, menu,
// reviews, related) over the trailing 7 days, from the usage ledger". Requests a client has
// already been answered (and charged) for count in its next trending call: trending waits
// for the usage read model to hold them (found by review: it served the read model as it was).
func TestTrendingCountsTheRequestsJustMade(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	places := importCatalog(t, dbURL)
	token := randomToken("admin-")
	a := startServe(t, serveConfig{Name: "A", DatabaseURL: dbURL, AdminToken: token})
	_, key := a.openAccount("Trend", 500)
	target := places[len(places)-1].ID // a little-rated place
	for i := 0; i < 5; i++ {
		a.readOK("/api/data/places/"+target, key.APIKey)
	}
	// Trending waits (about a second, usageSettleWait) for the usage projection to apply the
	// requests answered so far; it cannot apply them before they are visible to its gap-free
	// reader, and a transaction of another test's database on the shared cluster holds that
	// back for as long as it stays open. Wait for that first: what is tested is trending's own
	// wait, not the other tests' transactions.
	waitEventsVisible(t, dbURL)
	got := a.readOK("/api/data/trending", key.APIKey)
	var items []struct {
		PlaceID    string `json:"place_id"`
		Requests7d int    `json:"requests_7d"`
	}
	if err := json.Unmarshal(got.Data, &items); err != nil {
		t.Fatal(err)
	}
	if len(items) == 0 || items[0].PlaceID != target || items[0].Requests7d != 5 {
		t.Fatalf("trending right after 5 detail requests for %s: %s", target, got.Data)
	}
}
