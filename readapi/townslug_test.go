package readapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// "A value not in the alias list passes through unchanged and is
// matched by prefix, so a canonical slug works directly." The import accepts town slugs of up
// to 128 characters (domain maxIDLength), so every canonical slug the catalog can hold must be
// accepted as `town` on the place list, hidden gems and events.
func TestACanonicalTownSlugOfAnyImportableLengthWorksDirectly(t *testing.T) {
	slug := "town-" + strings.Repeat("a", 115) // 120 characters: a valid catalog slug
	s := newProjectedStack(t, []map[string]any{
		{"record": "town", "slug": slug, "name": "Long Name Town"},
		placeRecord("long-town-gem", "Long Town Gem", "food.cafe", slug, 37.5, -85.0, 10,
			map[string]any{"is_gem": true, "local_gem_score": 0.9}),
		{"record": "event", "event_id": "ev-long", "title": "Long Town Fair", "event_type": "festival",
			"start_date": "2025-06-20T15:00:00Z", "town_slug": slug},
	})
	key := s.key()
	q := url.QueryEscape(slug)
	for _, path := range []string{
		"/api/data/places?town=" + q,
		"/api/data/hidden-gems?town=" + q,
		"/api/data/events?town=" + q,
	} {
		r := s.unchecked(http.MethodGet, key, path)
		if r.Status != http.StatusOK {
			t.Errorf("GET %s (a canonical slug of %d characters): status %d, want 200: %s", path[:strings.Index(path, "?")], len(slug), r.Status, r.Body)
			continue
		}
		rows, _ := r.rows(t)
		if len(rows) != 1 {
			t.Errorf("GET %s: %d rows, want the town's 1: %s", path[:strings.Index(path, "?")], len(rows), r.Body)
		}
	}
}
