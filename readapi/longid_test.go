package readapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// "Unknown place_id on place detail returns 404" (the API spec); its errors table
// keeps 400 for "missing required parameters". A long id that no place has is an unknown
// place_id like any other: 404, not 400.
func TestAPlaceIDLongerThanAnyCatalogIDIs404NotFound(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	id := "no-such-place-" + strings.Repeat("x", 130) // 144 characters, URL-safe
	for _, suffix := range []string{"", "/menu", "/reviews", "/related"} {
		r := s.unchecked(http.MethodGet, key, "/api/data/places/"+id+suffix)
		if r.Status != http.StatusNotFound {
			t.Errorf("GET /api/data/places/{%d-char unknown id}%s: status %d, want 404: %s", len(id), suffix, r.Status, r.Body)
		}
	}
}
