package placeindex_test

import (
	"math"
	"slices"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
)

func TestDistanceKmIsHaversineOnTheMeanEarthRadius(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b placeindex.GeoPoint
		want float64
	}{
		{"same point", placeindex.GeoPoint{Lat: 38, Lng: -84}, placeindex.GeoPoint{Lat: 38, Lng: -84}, 0},
		{"one degree of latitude", placeindex.GeoPoint{Lat: 37, Lng: -85}, placeindex.GeoPoint{Lat: 38, Lng: -85}, placeindex.EarthRadiusKm * math.Pi / 180},
		{"antipodes", placeindex.GeoPoint{Lat: 0, Lng: 0}, placeindex.GeoPoint{Lat: 0, Lng: 180}, placeindex.EarthRadiusKm * math.Pi},
	} {
		if got := placeindex.DistanceKm(tc.a, tc.b); math.Abs(got-tc.want) > 0.01 {
			t.Errorf("%s: DistanceKm = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCategoryMatchesWholeNamespaceSegments(t *testing.T) {
	for _, tc := range []struct {
		category, prefix string
		want             bool
	}{
		{"food.restaurant", "", true},
		{"food", "food", true},
		{"food.restaurant.bbq", "food", true},
		{"food.restaurant.bbq", "food.restaurant", true},
		{"foodtruck", "food", false},
		{"food", "food.restaurant", false},
		{"food.restaurant", "food.rest", false},
	} {
		if got := placeindex.CategoryMatches(tc.category, tc.prefix); got != tc.want {
			t.Errorf("CategoryMatches(%q, %q) = %v, want %v", tc.category, tc.prefix, got, tc.want)
		}
	}
}

func TestWordsSplitOnAnythingButLettersAndDigits(t *testing.T) {
	if got, want := placeindex.Words("  Bar-B-Q food.restaurant Lexie's 24/7 "), []string{"bar", "b", "q", "food", "restaurant", "lexie", "s", "24", "7"}; !slices.Equal(got, want) {
		t.Errorf("Words = %q, want %q", got, want)
	}
	if got, want := placeindex.DistinctWords("Bar bar-B b BAR q"), []string{"bar", "b", "q"}; !slices.Equal(got, want) {
		t.Errorf("DistinctWords = %q, want %q", got, want)
	}
}
