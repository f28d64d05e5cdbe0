package readapi_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

// Slugs and ids order the lists byte by byte, as the place index orders the place list,
// whatever collation the operator created the database with: en-US puts "_" before "-" and
// "gem-a" before "Gem-B"; en-US-u-ka-shifted, like glibc's en_US.UTF-8, also ignores
// punctuation ("mountain-view" before "mount-sterling").
func TestListOrdersCompareIDsByteByByteWhateverTheDatabaseCollation(t *testing.T) {
	for _, locale := range []string{"en-US", "en-US-u-ka-shifted"} {
		t.Run(locale, func(t *testing.T) {
			s, store, index := newEmptyStackOn(t, pgtest.NewPoolICU(t, locale))
			ps := &projectedStack{stack: s, store: store, projs: projections.All(s.pool, index, s.clock.Now)}
			towns := []string{"mountain-view", "mount2", "mount-sterling"}
			gems := []string{"gem_c", "gem.d", "gem-c", "Gem-B", "gem-a"}
			events := []string{"ev_c", "ev.d", "ev-c", "EV-b", "ev-a"}
			var records []map[string]any
			for _, slug := range towns {
				records = append(records, map[string]any{"record": "town", "slug": slug, "name": slug})
			}
			for i, id := range gems {
				records = append(records, placeRecord(id, "Gem "+id, "food.cafe", "mount-sterling", 38.05+float64(i)/1000, -83.94, 7,
					map[string]any{"is_gem": true, "local_gem_score": 0.8}))
			}
			for _, id := range events {
				records = append(records, map[string]any{"record": "event", "event_id": id, "title": "Fair " + id,
					"start_date": "2025-06-20T18:00:00Z", "town_slug": "mount-sterling"})
			}
			ps.importRecords(records...)
			for _, ids := range [][]string{towns, gems, events} {
				slices.Sort(ids) // byte order
			}
			_, key := s.customer(500)

			rows, _ := s.get(key, "/api/data/towns").rows(t)
			if got := idsOf(rows, "slug"); !slices.Equal(got, towns) {
				t.Errorf("towns %v, want %v", got, towns)
			}
			var listed []string
			for offset := 0; offset < 6; offset += 2 {
				rows, _ := s.get(key, fmt.Sprintf("/api/data/places?town=mount-sterling&limit=2&offset=%d", offset)).rows(t)
				listed = append(listed, ids(rows)...)
			}
			if !slices.Equal(listed, gems) {
				t.Errorf("place list pages %v, want %v", listed, gems)
			}
			rows, _ = s.get(key, "/api/data/hidden-gems?town=mount-sterling&limit=50").rows(t)
			if got := ids(rows); !slices.Equal(got, gems) {
				t.Errorf("hidden gems %v, want %v", got, gems)
			}
			rows, _ = s.get(key, "/api/data/events?from=2025-06-20&to=2025-06-20").rows(t)
			if got := idsOf(rows, "event_id"); !slices.Equal(got, events) {
				t.Errorf("events %v, want %v", got, events)
			}
			// A request each: as many requests and ratings, so place_id orders them.
			for _, id := range gems {
				if r := s.get(key, "/api/data/places/"+id); r.Status != 200 {
					t.Fatalf("detail %s: %d %s", id, r.Status, r.Body)
				}
			}
			ps.catchUp()
			_, other := s.customer(500)
			rows, _ = s.get(other, "/api/data/trending").rows(t)
			if got := ids(rows); !slices.Equal(got, gems) {
				t.Errorf("trending %v, want %v", got, gems)
			}
		})
	}
}
