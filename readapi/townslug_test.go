package readapi_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// "A value not in the alias list passes through unchanged and is
// matched by prefix, so a canonical slug works directly." The import accepts town slugs of up
// to 128 characters (domain maxIDLength), so every canonical slug the catalog can hold must be
// accepted as `town` on the place list, hidden gems and events.
func TestACanonicalTownSlugOfAnyImportableLengthWorksDirectly(t *testing.T) {
	townSlugWorksDirectly(t, "town-"+strings.Repeat("a", 115)) // 120 characters: a valid catalog slug
}

// The import takes any slug of a-z, 0-9 and '-', doubled and edge dashes included; such a
// canonical slug must pass through unchanged too, not be slugified into another town's prefix
// (hidden gems and events charge for the list they answer).
func TestACanonicalTownSlugWithDoubledOrEdgeDashesWorksDirectly(t *testing.T) {
	for _, slug := range []string{"mount--vernon", "-dash-first", "dash-last-"} {
		t.Run(slug, func(t *testing.T) { townSlugWorksDirectly(t, slug) })
	}
}

// townSlugWorksDirectly imports a town of slug with a place and an event, and asks for them
// with the slug as `town`: each route answers its one row.
func townSlugWorksDirectly(t *testing.T, slug string) {
	t.Helper()
	s := newProjectedStack(t, []map[string]any{
		{"record": "town", "slug": slug, "name": "Odd Slug Town"},
		placeRecord("odd-gem", "Odd Gem", "food.cafe", slug, 37.5, -85.0, 10,
			map[string]any{"is_gem": true, "local_gem_score": 0.9}),
		{"record": "event", "event_id": "ev-odd", "title": "Odd Fair", "event_type": "festival",
			"start_date": "2025-06-20T15:00:00Z", "town_slug": slug},
	})
	key := s.key()
	for _, path := range []string{"/api/data/places", "/api/data/hidden-gems", "/api/data/events"} {
		r := s.unchecked(http.MethodGet, key, path+"?town="+url.QueryEscape(slug))
		if r.Status != http.StatusOK {
			t.Errorf("GET %s (a canonical slug of %d characters): status %d, want 200: %s", path, len(slug), r.Status, r.Body)
			continue
		}
		if rows, _ := r.rows(t); len(rows) != 1 {
			t.Errorf("GET %s?town=%s: %d rows, want the town's 1: %s", path, slug, len(rows), r.Body)
		}
	}
}

// What docs/api.md and the OpenAPI document say of `town` values beyond aliases and slugs: a
// value made only of '-' is slug-shaped, so it passes through and matches the slugs that begin
// with it; any other value is slugified first ("st. matthews" is st-matthews), and one left
// with no letter or digit a slug can hold ("- -", "-!", "!!!") matches no town.
func TestATownValueIsSlugifiedUnlessItIsSlugShaped(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		{"record": "town", "slug": "-dash-first", "name": "Dash First"},
		{"record": "town", "slug": "st-matthews", "name": "St. Matthews"},
		placeRecord("dash-cafe", "Dash Cafe", "food.cafe", "-dash-first", 37.5, -85.0, 10, nil),
		placeRecord("stm-cafe", "St Matthews Cafe", "food.cafe", "st-matthews", 38.25, -85.65, 10, nil),
	})
	key := s.key()
	for _, c := range []struct {
		town string
		want []string
	}{
		{"-", []string{"dash-cafe"}},
		{"--", nil},
		{"st. matthews", []string{"stm-cafe"}},
		{"St.  Matthews", []string{"stm-cafe"}},
		{"- -", nil},
		{"-!", nil},
		{"!!!", nil},
	} {
		rows, _ := s.get(key, "/api/data/places?town="+url.QueryEscape(c.town)).rows(t)
		if got := ids(rows); !slices.Equal(got, c.want) {
			t.Errorf("town=%q: %v, want %v", c.town, got, c.want)
		}
	}
}
