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

// TestNearAnywhereInACategoryMatchesABruteForceSortAfterMovesAndDeletes: a query of a category
// whose window reads every occupied cell (related places looked for anywhere on Earth) reads
// only the cells counted for its top level; those counts follow every put, move and delete, so
// the answer is still that of sorting every match.
func TestNearAnywhereInACategoryMatchesABruteForceSortAfterMovesAndDeletes(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	g := newGrid()
	categories := []string{"food", "food.bbq", "food.cafe.tea", "foodtruck", "shop", ".misc", "", "rare.one"}
	at := map[string]placeindex.Doc{}
	randomDoc := func(id string) placeindex.Doc {
		c := categories[r.IntN(len(categories)-1)] // "rare.one" is placed by hand below
		loc := &placeindex.GeoPoint{Lat: 36.5 + r.Float64()*2.6, Lng: -89.5 + r.Float64()*7.5}
		if r.IntN(5) == 0 { // anywhere on Earth, poles included
			loc = &placeindex.GeoPoint{Lat: -90 + r.Float64()*180, Lng: -180 + r.Float64()*360}
		}
		return placeindex.Doc{PlaceID: id, Category: c, Location: loc}
	}
	var docs []placeindex.Doc
	for i := range 4000 {
		docs = append(docs, randomDoc(fmt.Sprintf("p%04d", i)))
	}
	docs = append(docs, placeindex.Doc{PlaceID: "rare-1", Category: "rare.one", Location: &placeindex.GeoPoint{Lat: -33.87, Lng: 151.21}},
		placeindex.Doc{PlaceID: "rare-2", Category: "rare", Location: &placeindex.GeoPoint{Lat: 64.1, Lng: -21.9}})
	g.apply(docs, nil)
	for _, d := range docs {
		at[d.PlaceID] = d
	}
	// Moves (to another cell, another category, or off the map) and deletes.
	var moved []placeindex.Doc
	var deleted []string
	for i := range 1500 {
		id := fmt.Sprintf("p%04d", r.IntN(4000))
		switch i % 3 {
		case 0:
			moved = append(moved, randomDoc(id))
		case 1:
			moved = append(moved, placeindex.Doc{PlaceID: id, Category: at[id].Category}) // no location now
		default:
			deleted = append(deleted, id)
		}
	}
	g.apply(moved, deleted)
	for _, d := range moved {
		at[d.PlaceID] = d
	}
	for _, id := range deleted {
		delete(at, id)
	}
	var pts []point
	for _, d := range at {
		if d.Location != nil {
			pts = append(pts, point{id: d.PlaceID, lat: d.Location.Lat, lng: d.Location.Lng, category: d.Category})
		}
	}
	counted := 0
	for top, in := range g.tops {
		for k, n := range in {
			if n <= 0 || len(g.cells[k]) < n {
				t.Fatalf("top %q: cell %v counts %d of its %d points", top, k, n, len(g.cells[k]))
			}
			counted += n
		}
	}
	if counted != len(pts) || len(g.where) != len(pts) {
		t.Fatalf("tops count %d points, the grid holds %d, the test %d", counted, len(g.where), len(pts))
	}
	for n := range 300 {
		q := placeindex.GeoQuery{Center: placeindex.GeoPoint{Lat: -90 + r.Float64()*180, Lng: -180 + r.Float64()*360},
			RadiusKm: placeindex.AnywhereKm, Limit: 1 + r.IntN(12), ByCategory: true}
		if n%2 == 0 {
			q.Center = placeindex.GeoPoint{Lat: 36.5 + r.Float64()*2.6, Lng: -89.5 + r.Float64()*7.5}
		}
		q.CategoryPrefix = placeindex.TopLevel(categories[n%len(categories)])
		if n%5 == 0 {
			q.CategoryPrefix, q.ByCategory = categories[n%len(categories)], false
		}
		if n%3 == 0 {
			q.ExcludeID = pts[r.IntN(len(pts))].id
		}
		var all []placeindex.Hit
		for _, p := range pts {
			if p.id != q.ExcludeID && q.Matches(p.category) {
				all = append(all, placeindex.Hit{PlaceID: p.id, DistanceKm: placeindex.DistanceKm(q.Center, placeindex.GeoPoint{Lat: p.lat, Lng: p.lng})})
			}
		}
		slices.SortFunc(all, compareHits)
		want := all[:min(q.Limit, len(all))]
		if got := g.near(q); got.Total != len(all) || !slices.Equal(got.Hits, want) {
			t.Errorf("%+v: total %d, hits %v; want total %d, hits %v", q, got.Total, got.Hits, len(all), want)
		}
	}
	rare := g.near(placeindex.GeoQuery{Center: placeindex.GeoPoint{Lat: 38.04, Lng: -84.5}, RadiusKm: placeindex.AnywhereKm, CategoryPrefix: "rare", ByCategory: true, Limit: 10})
	if got := rare.Hits; len(got) != 2 || got[0].PlaceID != "rare-2" || got[1].PlaceID != "rare-1" {
		t.Errorf("rare anywhere from Lexington: %v, want Reykjavik's then Sydney's", got)
	}
}
