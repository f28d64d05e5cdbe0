package domain

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"
)

func viewedPlace(observed ...time.Time) Place {
	town, lat, lng, desc := "lexington", 38.04, -84.5, "Bourbon <and> music & more."
	phone := "(859) 555-0100"
	p := Place{
		PlaceRow: PlaceRow{PlaceID: "p-1", Name: "Bar & Grill", Category: "food.bbq", Address: "1 Main St",
			TownSlug: &town, Latitude: &lat, Longitude: &lng, Phone: &phone},
		Description:    &desc,
		EnrichmentTier: "premium",
		Hours:          &Hours{Mon: []TimeRange{{Open: "11:00", Close: "22:00"}}},
		Menu:           []MenuItem{{Name: "Hot Brown", Currency: "USD"}},
		ReviewSummary:  &ReviewSummary{Headline: "Good", Summary: "Smoky.", Confidence: 0.9, ReviewCount: 12},
		Sources:        map[string][]Observation{},
	}
	for i, at := range observed {
		src := []string{"osm", "yelp", "google", "fsq"}[i%4]
		p.Sources["phone"] = append(p.Sources["phone"], Observation{Source: src, Value: json.RawMessage(strconv.Quote(phone)), ObservedAt: at})
		p.Sources["website"] = append(p.Sources["website"], Observation{Source: src, Value: json.RawMessage(`"x.com"`), ObservedAt: at.Add(-40 * 24 * time.Hour)})
	}
	return p
}

func TestARenderedPlaceJoinsIntoTheRowAndDetailTheSpecShows(t *testing.T) {
	imported := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	p := viewedPlace(imported.Add(-24*time.Hour), imported.Add(-48*time.Hour), imported.Add(-72*time.Hour))
	v, err := RenderPlace(p, imported, now)
	if err != nil {
		t.Fatal(err)
	}
	url, _ := json.Marshal(CanonicalURL("https://kyapi.example", p.PlaceID))
	var row, detail map[string]any
	if err := json.Unmarshal(append(append(bytes.Clone(v.Row), url...), '}'), &row); err != nil {
		t.Fatalf("row does not join into JSON: %v\n%s", err, v.Row)
	}
	if err := json.Unmarshal(append(append(bytes.Clone(v.Row), url...), v.Detail...), &detail); err != nil {
		t.Fatalf("detail does not join into JSON: %v", err)
	}
	if row["canonical_url"] != "https://kyapi.example/places/p-1" || row["name"] != "Bar & Grill" || row["town_slug"] != "lexington" {
		t.Fatalf("row = %v", row)
	}
	for _, f := range []string{"hours", "description", "enrichment_tier", "field_trust"} {
		if _, ok := row[f]; ok {
			t.Fatalf("a list row shows the detail-only field %s", f)
		}
		if _, ok := detail[f]; !ok {
			t.Fatalf("detail lacks %s: %v", f, detail)
		}
	}
	if detail["hours"].(map[string]any)["tue"] == nil {
		t.Fatalf("a closed day must be [], not null: %v", detail["hours"])
	}
	trust := detail["field_trust"].(map[string]any)["phone"].(map[string]any)
	if trust["trustTier"] != TrustVerified {
		t.Fatalf("phone trust = %v", trust)
	}
	if !bytes.Contains(v.Row, []byte(`\u0026`)) || !bytes.Contains(v.Detail, []byte(`\u003c`)) {
		t.Fatalf("stored bytes must escape HTML as the read API's encoder does: %s %s", v.Row, v.Detail)
	}
	var menu []MenuItem
	if err := json.Unmarshal(v.Menu, &menu); err != nil || v.MenuItems != 1 || menu[0].Name != "Hot Brown" {
		t.Fatalf("menu = %s (%d items): %v", v.Menu, v.MenuItems, err)
	}
	var rs map[string]any
	if err := json.Unmarshal(v.Reviews, &rs); err != nil || rs["generated_at"] != "2026-03-01T12:00:00Z" || rs["place_id"] != "p-1" {
		t.Fatalf("reviews = %s: %v", v.Reviews, err)
	}

	bare := Place{PlaceRow: PlaceRow{PlaceID: "p-2", Name: "Plain", Category: "shop"}}
	b, err := RenderPlace(bare, imported, now)
	if err != nil || b.Menu != nil || b.Reviews != nil || b.MenuItems != 0 || b.TrustFrom != nil || b.TrustUntil != nil {
		t.Fatalf("a place without menu, reviews or sources: %+v %v", b, err)
	}
}

// The stored field_trust is served only inside its window, so the window must never claim
// an instant at which field_trust differs, and must end where it changes.
func TestAPlacesTrustWindowHoldsExactlyWhileEveryTierStays(t *testing.T) {
	observed := time.Date(2026, 1, 10, 8, 30, 0, 123456789, time.UTC)
	p := viewedPlace(observed, observed.Add(-time.Hour), observed.Add(-2*time.Hour))
	for _, now := range []time.Time{
		observed.Add(-time.Hour),                      // observations in the future
		observed.Add(90 * 24 * time.Hour),             // fresh
		observed.Add(TrustFreshFor),                   // exactly at the turn
		observed.Add(TrustFreshFor + time.Nanosecond), // just past it
		observed.Add(300 * 24 * time.Hour),
		observed.Add(TrustStaleAt + 24*time.Hour),
		observed.Add(5 * 365 * 24 * time.Hour),
	} {
		v, err := RenderPlace(p, observed, now)
		if err != nil {
			t.Fatal(err)
		}
		want := PlaceFieldTrust(p, now)
		// Bounds are rounded inward to the microsecond: only an instant that close to a
		// turn may fall outside the window it was rendered for.
		nearTurn := (v.TrustUntil != nil && v.TrustUntil.Sub(now).Abs() < time.Microsecond) ||
			(v.TrustFrom != nil && v.TrustFrom.Sub(now).Abs() < time.Microsecond)
		if !v.TrustHolds(now) && !nearTurn {
			t.Fatalf("at %v the window (%v, %v] leaves out the instant it was rendered at", now, v.TrustFrom, v.TrustUntil)
		}
		probe := func(at time.Time) {
			if v.TrustHolds(at) && !reflect.DeepEqual(PlaceFieldTrust(p, at), want) {
				t.Fatalf("rendered at %v, the window (%v, %v] claims %v where field_trust differs", now, v.TrustFrom, v.TrustUntil, at)
			}
		}
		if v.TrustUntil != nil {
			probe(*v.TrustUntil)
			probe(v.TrustUntil.Add(time.Nanosecond))
			if v.TrustHolds(v.TrustUntil.Add(time.Microsecond)) {
				t.Fatalf("window holds past its end %v", v.TrustUntil)
			}
			if reflect.DeepEqual(PlaceFieldTrust(p, v.TrustUntil.Add(time.Microsecond)), want) {
				t.Fatalf("the window ends at %v, where nothing changes", v.TrustUntil)
			}
		}
		if v.TrustFrom != nil {
			probe(*v.TrustFrom)
			probe(v.TrustFrom.Add(time.Nanosecond))
		}
		for d := -400 * 24 * time.Hour; d <= 400*24*time.Hour; d += 7 * time.Hour {
			probe(now.Add(d))
		}
	}
}
