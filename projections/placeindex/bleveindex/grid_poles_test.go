package bleveindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
)

func bruteNear(pts []point, q placeindex.GeoQuery) placeindex.Result {
	limit, offset := placeindex.Page(q.Limit, q.Offset)
	var all []placeindex.Hit
	for _, p := range pts {
		if p.id == q.ExcludeID || !placeindex.CategoryMatches(p.category, q.CategoryPrefix) {
			continue
		}
		if d := placeindex.DistanceKm(q.Center, placeindex.GeoPoint{Lat: p.lat, Lng: p.lng}); d <= q.RadiusKm {
			all = append(all, placeindex.Hit{PlaceID: p.id, DistanceKm: d})
		}
	}
	slices.SortFunc(all, compareHits)
	page := all[min(offset, len(all)):]
	page = page[:min(limit, len(page))]
	return placeindex.Result{Hits: page, Total: len(all)}
}

// Geo search takes any lat in [-90, 90] and sorts by great-circle distance, nearest first
// (docs/api.md, "Places"). Near a pole the clamp-into-rectangle lower bound of boundsOf is off
// by up to a cell (5.5 km), far more than its slack, so a nearer cell is skipped once the heap
// is full.
func TestNearFindsTheNearestPlaceAcrossAPole(t *testing.T) {
	g := newGrid()
	pts := []point{
		{id: "a", lat: 89.72, lng: 0, category: "food"},         // ~20 km from the center
		{id: "b", lat: 89.9499, lng: 179.999, category: "food"}, // ~16.7 km, across the pole
	}
	for _, p := range pts {
		g.put(p)
	}
	q := placeindex.GeoQuery{Center: placeindex.GeoPoint{Lat: 89.9, Lng: 0}, RadiusKm: 50, Limit: 1}
	got, want := g.near(q), bruteNear(pts, q)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("near %+v:\n got  %v\n want %v (brute-force sort)", q, got, want)
	}
}

// Random high-latitude points and queries compared to a brute-force sort.
func TestNearAtHighLatitudesMatchesABruteForceSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	g := newGrid()
	var pts []point
	for i := range 4000 {
		lat := 89.0 + r.Float64()
		if i%2 == 0 {
			lat = -lat
		}
		p := point{id: fmt.Sprintf("p%04d", i), lat: lat, lng: -180 + r.Float64()*360, category: "food"}
		pts = append(pts, p)
		g.put(p)
	}
	bad := 0
	for n := range 500 {
		lat := 89.0 + r.Float64()
		if n%2 == 0 {
			lat = -lat
		}
		q := placeindex.GeoQuery{Center: placeindex.GeoPoint{Lat: lat, Lng: -180 + r.Float64()*360},
			RadiusKm: 1 + r.Float64()*49, Limit: 1 + r.IntN(5), Offset: r.IntN(3)}
		got, want := g.near(q), bruteNear(pts, q)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			if bad++; bad <= 3 {
				t.Errorf("query %d %+v:\n got  %v\n want %v", n, q, got, want)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of 500 queries differ from a brute-force sort", bad)
	}
}
