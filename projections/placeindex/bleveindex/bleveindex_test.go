package bleveindex_test

import (
	"context"
	"slices"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
	"github.com/kyapi/kyapi/projections/placeindex/placeindextest"
)

func open(t *testing.T, dir string) *bleveindex.Index {
	t.Helper()
	idx, err := bleveindex.Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { idx.Close() })
	return idx
}

func TestContract(t *testing.T) {
	placeindextest.Run(t,
		func(t *testing.T) placeindex.Index { return open(t, t.TempDir()) },
		placeindextest.WithReopen(func(t *testing.T, old placeindex.Index) placeindex.Index {
			idx := old.(*bleveindex.Index)
			if err := idx.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, idx.Dir())
		}),
	)
}

func TestNearFindsPlacesAcrossTheAntimeridianAndAtThePoles(t *testing.T) {
	ctx := context.Background()
	idx := open(t, t.TempDir())
	docs := []placeindex.Doc{
		{PlaceID: "east", Category: "x", Location: &placeindex.GeoPoint{Lat: 10, Lng: 179.99}},
		{PlaceID: "west", Category: "x", Location: &placeindex.GeoPoint{Lat: 10, Lng: -179.99}},
		{PlaceID: "pole", Category: "x", Location: &placeindex.GeoPoint{Lat: 89.99, Lng: 0}},
		{PlaceID: "pole-far-side", Category: "x", Location: &placeindex.GeoPoint{Lat: 89.99, Lng: 180}},
	}
	if err := idx.Upsert(ctx, docs, nil, "c1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		center placeindex.GeoPoint
		want   []string
	}{
		{placeindex.GeoPoint{Lat: 10, Lng: -179.995}, []string{"west", "east"}},
		{placeindex.GeoPoint{Lat: 10, Lng: 179.995}, []string{"east", "west"}},
		{placeindex.GeoPoint{Lat: 89.995, Lng: 90}, []string{"pole", "pole-far-side"}},
	} {
		res, err := idx.Near(ctx, placeindex.GeoQuery{Center: tc.center, RadiusKm: 5, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range res.Hits {
			got = append(got, h.PlaceID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("near %+v: got %v, want %v", tc.center, got, tc.want)
		}
	}
}
