package bleveindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// TestNearKeepsExactlyThePageASortOfEveryMatchWouldGive: the grid keeps only the nearest
// offset+limit matches; its page and total are those of sorting every match, ties (places at
// the same distance) broken by place id, for any page.
func TestNearKeepsExactlyThePageASortOfEveryMatchWouldGive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	g := newGrid()
	var pts []point
	categories := []string{"food", "food.bbq", "drink.bar", "foodtruck"}
	place := func(lat, lng float64) {
		i := len(pts)
		p := point{id: fmt.Sprintf("p%04d", i), lat: lat, lng: lng, category: categories[i%len(categories)]}
		if i%10 == 0 && i > 0 { // a twin: same place, another id
			p.lat, p.lng = pts[i-1].lat, pts[i-1].lng
		}
		pts = append(pts, p)
		g.put(p)
	}
	for range 3000 {
		place(37+r.Float64()*0.6, -85+r.Float64()*0.6)
	}
	for range 500 { // across the antimeridian
		lng := 179.8 + r.Float64()*0.4
		if lng > 180 {
			lng -= 360
		}
		place(-17+r.Float64()*0.4, lng)
	}
	queries := []placeindex.GeoQuery{
		{Center: placeindex.GeoPoint{Lat: -16.8, Lng: 179.99}, RadiusKm: 15, Limit: 30, Offset: 3},
		{Center: placeindex.GeoPoint{Lat: -16.8, Lng: -179.95}, RadiusKm: 40, Limit: 10, CategoryPrefix: "food"},
		{Center: placeindex.GeoPoint{Lat: 37.3, Lng: -84.7}, RadiusKm: 30, Limit: 25, Offset: 10, CategoryPrefix: "food"},
		{Center: placeindex.GeoPoint{Lat: 37.3, Lng: -84.7}, RadiusKm: 5, Limit: 20},
		{Center: placeindex.GeoPoint{Lat: 37.3, Lng: -84.7}, RadiusKm: 20, Limit: 20, Offset: 45},
		{Center: placeindex.GeoPoint{Lat: 37.1, Lng: -84.9}, RadiusKm: 50, Limit: 7, Offset: 1},
		{Center: placeindex.GeoPoint{Lat: 37.1, Lng: -84.9}, RadiusKm: 50, Limit: 100, Offset: 2950},
		{Center: placeindex.GeoPoint{Lat: 37.1, Lng: -84.9}, RadiusKm: 50, Limit: 100, Offset: 5000},
		{Center: placeindex.GeoPoint{Lat: 37.3, Lng: -84.7}, RadiusKm: 10, Limit: 1, ExcludeID: "p0001"},
	}
	fixed := len(queries)
	for range 1000 { // and random ones, whose circles cut cells every way
		q := placeindex.GeoQuery{Center: placeindex.GeoPoint{Lat: 37.1 + r.Float64()*0.4, Lng: -84.9 + r.Float64()*0.4},
			RadiusKm: 0.5 + r.Float64()*25, Limit: 1 + r.IntN(30), Offset: r.IntN(40)}
		if r.IntN(3) == 0 {
			q.CategoryPrefix = "food"
		}
		queries = append(queries, q)
	}
	for n, q := range queries {
		var all []placeindex.Hit
		for _, p := range pts {
			if d := placeindex.DistanceKm(q.Center, placeindex.GeoPoint{Lat: p.lat, Lng: p.lng}); d <= q.RadiusKm && p.id != q.ExcludeID &&
				placeindex.CategoryMatches(p.category, q.CategoryPrefix) {
				all = append(all, placeindex.Hit{PlaceID: p.id, DistanceKm: d})
			}
		}
		slices.SortFunc(all, compareHits)
		want := all[min(q.Offset, len(all)):min(q.Offset+q.Limit, len(all))]
		got := g.near(q)
		if len(all) == 0 && n < fixed {
			t.Fatalf("%+v: the test's places give this query no match", q)
		}
		if got.Total != len(all) || !slices.Equal(got.Hits, want) {
			t.Errorf("%+v: total %d, hits %v; want total %d, hits %v", q, got.Total, got.Hits, len(all), want)
		}
	}
}

// TestCellBoundsHoldEveryPointOfTheCell: no point of a cell is nearer to a center than the
// cell's minKm or farther than its maxKm (near prunes and counts whole cells by them), at any
// latitude a place can have and across the antimeridian.
func TestCellBoundsHoldEveryPointOfTheCell(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 2000 {
		center := placeindex.GeoPoint{Lat: -90 + r.Float64()*180, Lng: -180 + r.Float64()*360}
		if i%2 == 0 { // next to the antimeridian, on either side
			center.Lng = 179 + r.Float64()*2
			if center.Lng >= 180 {
				center.Lng -= 360
			}
		}
		// A cell up to about 60 km from the center, in any direction.
		lat := min(max(center.Lat-0.6+r.Float64()*1.2, -89.9), 89.9)
		lng := center.Lng - 0.8 + r.Float64()*1.6
		if lng >= 180 {
			lng -= 360
		}
		if lng < -180 {
			lng += 360
		}
		k := cellOf(lat, lng)
		b := boundsOf(center, int(k.row), int(k.col), nil)
		lat0, lng0 := float64(k.row)*cellDeg-90, float64(k.col)*cellDeg-180
		for i := range 200 {
			fl, fg := r.Float64(), r.Float64()
			switch i % 4 { // edges and corners as well as the inside
			case 0:
				fl = float64(r.IntN(2))
			case 1:
				fg = float64(r.IntN(2))
			}
			p := placeindex.GeoPoint{Lat: lat0 + fl*cellDeg, Lng: lng0 + fg*cellDeg}
			if d := placeindex.DistanceKm(center, p); d < b.minKm || d > b.maxKm {
				t.Fatalf("center %+v, cell %+v: point %+v at %.6f km, outside [%.6f, %.6f]", center, k, p, d, b.minKm, b.maxKm)
			}
		}
	}
}
