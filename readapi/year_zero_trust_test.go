package readapi_test

import (
	"testing"
	"time"
)

// lastVerifiedAt is the newest observed_at (docs/api.md, "Places"), and the import takes dates
// from the year 0000 on (docs/limits.md, "Catalog import").
func TestLastVerifiedAtIsTheNewestObservationEvenBeforeTheYearOne(t *testing.T) {
	at := time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC)
	s := newProjectedStack(t, []map[string]any{placeRecord("old", "Old Place", "food.cafe", "paducah", 0, 0, 1, map[string]any{
		"sources": map[string]any{"name": []any{obs("a", "Old Place", at)}},
	})})
	e := trustOf(t, s, s.key(), "old", "name")
	if e["lastVerifiedAt"] != "0000-06-01T00:00:00Z" || e["trustTier"] != "low" {
		t.Fatalf("name trust %v, want lastVerifiedAt 0000-06-01T00:00:00Z, low", e)
	}
}
