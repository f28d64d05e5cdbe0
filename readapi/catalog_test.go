package readapi_test

import (
	"testing"
)

// geoCenter is the point the geo-search test searches around (downtown Paducah); the
// geo-* places lie due north of it at the given distances.
var geoCenter = struct{ Lat, Lng float64 }{37.0834, -88.6000}

// kmNorth is the latitude of a point km kilometres north of geoCenter.
func kmNorth(km float64) float64 { return geoCenter.Lat + km/111.195 }

// catalogNDJSON is the test catalog: four towns, places in Lexington, Louisville, Bowling
// Green and Paducah (three "Burger Barn"s that are a chain by name, one marked chain),
// and calendar events around the test clock.
func catalogNDJSON(t *testing.T) string {
	t.Helper()
	recent := "2025-05-01T10:00:00Z"
	source := func(src string, v any) map[string]any {
		return map[string]any{"source": src, "value": v, "observed_at": recent}
	}
	place := func(id, name, category, town string, lat, lng float64, ratingCount int, extra map[string]any) map[string]any {
		p := placeRecord(id, name, category, town, lat, lng, ratingCount, extra)
		if _, ok := extra["rating"]; !ok {
			p["rating"] = 4.2
		}
		return p
	}
	records := []map[string]any{
		{"record": "town", "slug": lexington, "name": "Lexington", "county": "Fayette", "population": 320000},
		{"record": "town", "slug": louisville, "name": "Louisville", "county": "Jefferson", "population": 620000},
		{"record": "town", "slug": "bowling-green", "name": "Bowling Green", "county": nil, "population": nil},
		{"record": "town", "slug": "paducah", "name": "Paducah", "county": "McCracken", "population": 27000},

		place("lex-bourbon-bar", "Bourbon Barrel Bar", "food.bar", lexington, 38.0406, -84.5037, 500, map[string]any{
			"address": "1 Main St, Lexington, KY", "phone": "+1 859-555-0100", "website": "https://bourbonbarrel.example",
			"is_gem": true, "local_gem_score": 0.9, "description": "Small batch bourbon and music.",
			"enrichment_tier": "premium",
			"hours":           map[string]any{"mon": []any{map[string]any{"open": "16:00", "close": "24:00"}}},
			"menu": []any{
				map[string]any{"name": "Old Fashioned", "price": 12.5, "section": "Cocktails"},
				map[string]any{"name": "Burgoo", "description": "Kentucky stew"},
			},
			"review_summary": map[string]any{"headline": "Cozy bourbon den", "summary": "Guests love the selection.",
				"confidence": 0.8, "review_count": 120, "generated_at": "2025-06-01T00:00:00Z"},
			"sources": map[string]any{"phone": []any{
				source("google", "859-555-0100"), source("yelp", "(859) 555-0100"), source("website", "+1 859 555 0100"),
			}},
		}),
		place("lex-coffee", "Lexington Coffee", "food.cafe", lexington, 38.0450, -84.4950, 300, map[string]any{"local_gem_score": 0.75}),
		place("lex-bbq", "Smoky Bbq", "food.restaurant.bbq", lexington, 38.0300, -84.5100, 200, nil),
		place("lex-books", "Pages Bookshop", "shop.books", lexington, 38.0500, -84.4900, 100, nil),
		place("lex-nocoords", "Nowhere Diner", "food.diner", lexington, 0, 0, 50, nil),
		place("lex-burger-1", "Burger Barn", "food.restaurant", lexington, 38.0410, -84.5000, 40, map[string]any{"is_gem": true, "local_gem_score": 0.95}),
		place("lex-quickmart", "Quick Mart", "shop.convenience", lexington, 38.0420, -84.5010, 30, map[string]any{"is_gem": true, "local_gem_score": 0.99, "is_chain": true}),
		place("lou-bourbon", "Bourbon Row Tavern", "food.bar", louisville, 38.2527, -85.7585, 400, map[string]any{"is_gem": true, "local_gem_score": 0.8}),
		place("lou-hot-brown", "Hot Brown House", "food.restaurant", louisville, 38.2500, -85.7600, 350, nil),
		place("lou-burger-2", "Burger Barn", "food.restaurant", louisville, 38.2510, -85.7590, 20, map[string]any{"is_gem": true, "local_gem_score": 0.95}),
		place("bg-burger-3", "Burger Barn", "food.restaurant", "bowling-green", 36.9685, -86.4808, 10, map[string]any{"is_gem": true, "local_gem_score": 0.95}),
		place("bg-cave", "Cave Cafe", "food.cafe", "bowling-green", 36.9700, -86.4800, 5, nil),
		place("geo-a", "Anchor Repair", "services.repair", "paducah", kmNorth(0.5), geoCenter.Lng, 4, nil),
		place("geo-b", "Bolt Repair", "services.repair", "paducah", kmNorth(1.5), geoCenter.Lng, 3, nil),
		place("geo-c", "Cog Repair", "services.repair", "paducah", kmNorth(2.9), geoCenter.Lng, 2, nil),
		place("geo-out", "Outer Repair", "services.repair", "paducah", kmNorth(3.1), geoCenter.Lng, 1, nil),

		{"record": "event", "event_id": "ev-past", "title": "Spring Fair", "event_type": "festival", "start_date": "2025-06-01T15:00:00Z", "town_slug": lexington},
		{"record": "event", "event_id": "ev-jazz", "title": "Jazz Night", "event_type": "music", "start_date": "2025-06-20T23:00:00Z",
			"end_date": "2025-06-21T02:00:00Z", "town_slug": lexington, "venue_place_id": "lex-bourbon-bar"},
		{"record": "event", "event_id": "ev-waterfront", "title": "Waterfront Market", "event_type": "market", "start_date": "2025-06-25T14:00:00Z", "town_slug": louisville},
		{"record": "event", "event_id": "ev-july", "title": "Fourth of July Parade", "event_type": "community", "start_date": "2025-07-01T19:00:00Z", "town_slug": lexington},
		{"record": "event", "event_id": "ev-winter", "title": "Winter Lights", "event_type": "arts", "start_date": "2025-12-01T22:00:00Z", "town_slug": lexington},
	}
	return ndjson(t, records)
}
