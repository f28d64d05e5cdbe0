package readapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A town or q that no place can match is a filter that matches nothing, not a filter
// dropped: dropped, it answered (and charged for) the rows of every town.
func TestAFilterNoPlaceCanMatchListsNothingAndCostsNothing(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	for _, query := range []string{"town=!!!", "town=" + url.QueryEscape("東京"), "town='", "q=!!!", "q=" + url.QueryEscape("¿?"), "town=!!!&q=bbq"} {
		rows, m := s.get(key, "/api/data/places?"+query).rows(t)
		if len(rows) != 0 || m.CreditsUsed != 0 {
			t.Errorf("places?%s: %d rows %v, %d credits used; want none", query, len(rows), ids(rows), m.CreditsUsed)
		}
	}
	if b := s.balance(account); b != 1000 {
		t.Errorf("balance %d after lists that matched nothing, want 1000", b)
	}
	for _, route := range []string{"hidden-gems", "events"} {
		if rows, _ := s.get(key, "/api/data/"+route+"?town=!!!").rows(t); len(rows) != 0 {
			t.Errorf("%s?town=!!!: %d rows, want none", route, len(rows))
		}
	}
	// The same routes unfiltered do have rows: the answers above are the filters' doing.
	for _, path := range []string{"/api/data/places", "/api/data/hidden-gems"} {
		if rows, _ := s.get(key, path).rows(t); len(rows) == 0 {
			t.Fatalf("%s: no rows at all; the test proves nothing", path)
		}
	}
}

// A place id no record can have (not UTF-8, or with a NUL PostgreSQL cannot store) is an
// unknown place: 404 not_found, not a 400 that names nothing, and nothing charged.
func TestAPlaceIDNoRecordCanHaveIsNotFound(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	for _, p := range []string{"/api/data/places/%ff", "/api/data/places/%00", "/api/data/places/a%00b/menu",
		"/api/data/places/%ff/reviews", "/api/data/places/%ff/related"} {
		r := s.unchecked(http.MethodGet, key, p)
		if r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), `"not_found"`) {
			t.Errorf("%s: %d %s; want 404 not_found", p, r.Status, r.Body)
		}
	}
	if b := s.balance(account); b != 1000 {
		t.Errorf("balance %d, want 1000", b)
	}
}
