package readapi_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// importProjecting imports records and catches up only the projections named in names: the
// others lag behind, as the place index and the catalog read model of a serving process do
// for a moment (they are projected apart, each at its own pace).
func (s *projectedStack) importProjecting(names []string, records ...map[string]any) {
	s.t.Helper()
	if _, err := (commands.ImportCatalog{Store: s.store, Clock: s.clock.Now}).Handle(ctx, strings.NewReader(ndjson(s.t, records)), eventstore.Metadata{}); err != nil {
		s.t.Fatalf("import: %v", err)
	}
	for _, p := range s.projs {
		if slices.Contains(names, p.Name()) {
			if _, err := projections.CatchUp(ctx, s.pool, p, 1000, nil); err != nil {
				s.t.Fatalf("catch up %s: %v", p.Name(), err)
			}
		}
	}
}

// A geo search row is the place as the catalog read model holds it, while the hit is where the
// place index found it: with one of them a version ahead (a place moved far away, the index or
// the catalog not yet projected), the row was served with a distance_km it is not at and
// charged, 1,900 km outside the radius asked for. It is left out, unpaid, as a hit the read
// model does not hold yet.
func TestASearchRowIsServedOnlyAtTheLocationTheIndexFoundItAt(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		placeRecord("moved", "Alpha Grill", "food.restaurant", "paducah", geoCenter.Lat, geoCenter.Lng, 10, nil),
		placeRecord("stays", "Beta Books", "shop.books", "paducah", kmNorth(1), geoCenter.Lng, 50, nil),
		placeRecord("goes", "Gamma Gifts", "shop.gifts", "paducah", kmNorth(2), geoCenter.Lng, 5, nil),
	})
	frankfort := placeindex.GeoPoint{Lat: 38.2009, Lng: -84.8733}
	center := placeindex.GeoPoint{Lat: geoCenter.Lat, Lng: geoCenter.Lng}
	// check searches 5 km around at with a new customer: every row served is paid, and is at
	// the distance_km it says.
	check := func(what string, at placeindex.GeoPoint, want []string) {
		t.Helper()
		id, key := s.customer(500)
		rows, m := s.get(key, fmt.Sprintf("/api/data/search?lat=%v&lng=%v&radius=5", at.Lat, at.Lng)).rows(t)
		for _, r := range rows {
			lat, _ := r["latitude"].(float64)
			lng, _ := r["longitude"].(float64)
			if d := placeindex.DistanceKm(at, placeindex.GeoPoint{Lat: lat, Lng: lng}); r["distance_km"] != d {
				t.Errorf("%s: row %s served at %v,%v, %v km away, with distance_km %v", what, r["place_id"], lat, lng, d, r["distance_km"])
			}
		}
		if paid := 1000 - s.balance(id); !slices.Equal(ids(rows), want) || m.CreditsUsed != int64(len(want)) || paid != int64(len(want)) {
			t.Fatalf("%s: rows %v, credits_used %d, %d paid; want rows %v, each paid", what, ids(rows), m.CreditsUsed, paid, want)
		}
	}

	// The catalog ahead: "moved" is in Frankfort in the read model, at the centre in the index.
	s.importProjecting([]string{"catalog"}, placeRecord("moved", "Alpha Grill", "food.restaurant", "frankfort", 38.2009, -84.8733, 10, nil))
	check("catalog ahead of the index", center, []string{"stays", "goes"})

	// The index ahead: "goes" is in Frankfort in the index, still 2 km north in the read model.
	s.importProjecting([]string{"placeindex"}, placeRecord("goes", "Gamma Gifts", "shop.gifts", "frankfort", 38.2010, -84.8733, 5, nil))
	check("index ahead of the catalog", frankfort, []string{"moved"})

	// Once both hold the same versions, every place is served where it is.
	s.catchUp()
	check("both caught up, at the centre", center, []string{"stays"})
	check("both caught up, in Frankfort", frankfort, []string{"moved", "goes"})
}

// The place list's town filter likewise: a place that moved to another town was listed (and
// charged) under the town it had left, its row naming the new one, while the index or the
// catalog read model was a version behind the other. It is left out, unpaid.
func TestAPlaceListRowIsServedOnlyInTheTownAsked(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		placeRecord("moves", "Alpha Grill", "food.restaurant", "paducah", geoCenter.Lat, geoCenter.Lng, 10, nil),
		placeRecord("stays", "Beta Books", "shop.books", "paducah", kmNorth(1), geoCenter.Lng, 50, nil),
		placeRecord("goes", "Gamma Grill", "food.restaurant", "paducah", kmNorth(2), geoCenter.Lng, 5, nil),
	})
	check := func(what, query string, want []string) {
		t.Helper()
		id, key := s.customer(500)
		rows, m := s.get(key, "/api/data/places?"+query).rows(t)
		if paid := 1000 - s.balance(id); !slices.Equal(ids(rows), want) || m.CreditsUsed != int64(len(want)) || paid != int64(len(want)) {
			t.Fatalf("%s, %s: rows %v (towns %v), credits_used %d, %d paid; want rows %v, each paid", what, query, ids(rows), towns(rows), m.CreditsUsed, paid, want)
		}
	}

	// The catalog ahead: "moves" is in Frankfort in the read model, in Paducah in the index.
	s.importProjecting([]string{"catalog"}, placeRecord("moves", "Alpha Grill", "food.restaurant", "frankfort", 38.2009, -84.8733, 10, nil))
	check("catalog ahead of the index", "town=paducah", []string{"stays", "goes"})
	check("catalog ahead of the index", "town=paducah&q=grill", []string{"goes"})

	// The index ahead: "goes" is in Frankfort in the index, still in Paducah in the read model.
	s.importProjecting([]string{"placeindex"}, placeRecord("goes", "Gamma Grill", "food.restaurant", "frankfort", 38.2010, -84.8733, 5, nil))
	check("index ahead of the catalog", "town=frankfort", []string{"moves"})
	check("index ahead of the catalog", "town=frank&q=grill", []string{"moves"})

	s.catchUp()
	check("both caught up", "town=paducah", []string{"stays"})
	check("both caught up", "town=frankfort", []string{"moves", "goes"})
}

func towns(rows []map[string]any) []any {
	out := make([]any, len(rows))
	for i, r := range rows {
		out[i] = r["town_slug"]
	}
	return out
}
