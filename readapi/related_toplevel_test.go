package readapi_test

import (
	"slices"
	"testing"
)

// docs/api.md, "Places": related places share the place's top-level category, "the part of
// category before the first .". A category that starts with a dot has an empty top level,
// which no other place of the catalog here shares.
func TestRelatedPlacesOfACategoryWithAnEmptyTopLevelShareIt(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		placeRecord("odd", "Odd", ".misc", "paducah", geoCenter.Lat, geoCenter.Lng, 1, nil),
		placeRecord("twin", "Twin", ".other", "paducah", kmNorth(1), geoCenter.Lng, 1, nil),
		placeRecord("cafe", "Cafe", "food.cafe", "paducah", kmNorth(0.5), geoCenter.Lng, 1, nil),
	})
	items, _ := s.get(s.key(), "/api/data/places/odd/related").rows(t)
	if got := ids(items); !slices.Equal(got, []string{"twin"}) {
		t.Fatalf("related of .misc: %v, want [twin] (top-level \"\" only)", got)
	}
}
