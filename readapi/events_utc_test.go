package readapi_test

import "testing"

// docs/limits.md, "Catalog import": dates are taken with any offset from -23:59 to +23:59
// and "they are served in UTC" (a review summary's generated_at and a field's lastVerifiedAt
// are). An event's start_date and end_date are dates of the import too.
func TestAnEventImportedWithAnOffsetIsServedInUTC(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{{"record": "event", "event_id": "e-offset", "title": "Porch Concert",
		"start_date": "2025-06-20T18:00:00-05:00", "end_date": "2025-06-20T21:30:00.5-05:00", "town_slug": "paducah"}})
	rows, _ := s.get(s.key(), "/api/data/events?from=2025-06-20&to=2025-06-21").rows(t)
	if len(rows) != 1 {
		t.Fatalf("events %v", rows)
	}
	if rows[0]["start_date"] != "2025-06-20T23:00:00Z" || rows[0]["end_date"] != "2025-06-21T02:30:00.5Z" {
		t.Fatalf("start_date %v end_date %v, want 2025-06-20T23:00:00Z and 2025-06-21T02:30:00.5Z (in UTC)", rows[0]["start_date"], rows[0]["end_date"])
	}
}
