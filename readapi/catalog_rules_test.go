package readapi_test

// The catalog's rules as served, end to end: records imported through the real command,
// projected by the real catalog, usage and place-index projections, read over HTTP.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/projections"
)

// projectedStack is a read API over a real database whose read models and embedded index are fed by
// the real projections (CatchUp), so a re-import flows exactly as in a serving process.
type projectedStack struct {
	*stack
	store *eventstore.Store
	projs []projections.Projection
}

func newProjectedStack(t *testing.T, records []map[string]any) *projectedStack {
	t.Helper()
	s, store, index := newEmptyStack(t)
	rv := &projectedStack{stack: s, store: store, projs: projections.All(s.pool, index, s.clock.Now)}
	if records != nil {
		rv.importRecords(records...)
	}
	return rv
}

// ndjson is the records as an import body, a line each.
func ndjson(t *testing.T, records []map[string]any) string {
	var b strings.Builder
	for _, r := range records {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func (s *projectedStack) importRecords(records ...map[string]any) {
	s.t.Helper()
	s.importText(ndjson(s.t, records))
}

func (s *projectedStack) importText(text string) {
	s.t.Helper()
	if _, err := (commands.ImportCatalog{Store: s.store, Clock: s.clock.Now}).Handle(ctx, strings.NewReader(text), eventstore.Metadata{}); err != nil {
		s.t.Fatalf("import: %v", err)
	}
	s.catchUp()
}

func (s *projectedStack) catchUp() {
	s.t.Helper()
	for _, p := range s.projs {
		if _, err := projections.CatchUp(ctx, s.pool, p, 1000, nil); err != nil {
			s.t.Fatalf("catch up %s: %v", p.Name(), err)
		}
	}
}

// placeRecord is a place line of an import: rating 4.0, coordinates unless lat is 0, then extra.
func placeRecord(id, name, category, town string, lat, lng float64, ratingCount int, extra map[string]any) map[string]any {
	p := map[string]any{"record": "place", "place_id": id, "name": name, "category": category,
		"town_slug": town, "rating_count": ratingCount, "rating": 4.0}
	if lat != 0 {
		p["latitude"], p["longitude"] = lat, lng
	}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

func obs(src string, v any, at time.Time) map[string]any {
	return map[string]any{"source": src, "value": v, "observed_at": at.Format(time.RFC3339Nano)}
}

func (s *projectedStack) key() string {
	_, key := s.customer(500)
	return key
}

// ---------------------------------------------------------------------------------------------
// Catalog updates

func TestSameIDTwiceInOneBatchServesTheLastEverywhere(t *testing.T) {
	s := newProjectedStack(t, nil)
	s.importText(ndjson(t, []map[string]any{
		placeRecord("dup", "Alpha Grill", "food.restaurant", "paducah", geoCenter.Lat, geoCenter.Lng, 10, map[string]any{"description": "first text"}),
		placeRecord("other", "Other Shop", "shop.books", "paducah", kmNorth(1), geoCenter.Lng, 5, nil),
		placeRecord("dup", "Zulu Diner", "food.diner", "frankfort", 38.2009, -84.8733, 99, map[string]any{"description": "second text"}),
	}))
	key := s.key()
	d, _ := s.get(key, "/api/data/places/dup").object(t)
	if d["name"] != "Zulu Diner" || d["town_slug"] != "frankfort" || d["description"] != "second text" {
		t.Fatalf("detail %v", d)
	}
	rows, _ := s.get(key, "/api/data/places?q=alpha").rows(t)
	if len(rows) != 0 {
		t.Fatalf("q=alpha: %v", ids(rows))
	}
	rows, _ = s.get(key, "/api/data/places?q=zulu").rows(t)
	if !slices.Equal(ids(rows), []string{"dup"}) || rows[0]["name"] != "Zulu Diner" {
		t.Fatalf("q=zulu: %v", rows)
	}
	rows, _ = s.get(key, "/api/data/places?town=paducah").rows(t)
	if !slices.Equal(ids(rows), []string{"other"}) {
		t.Fatalf("town=paducah: %v", ids(rows))
	}
	rows, _ = s.get(key, fmt.Sprintf("/api/data/search?lat=%v&lng=%v&radius=5", geoCenter.Lat, geoCenter.Lng)).rows(t)
	if !slices.Equal(ids(rows), []string{"other"}) {
		t.Fatalf("search at the first location: %v", ids(rows))
	}
	rows, _ = s.get(key, "/api/data/places").rows(t)
	if !slices.Equal(ids(rows), []string{"dup", "other"}) {
		t.Fatalf("list by rating_count: %v", ids(rows))
	}
}

func TestReimportedPlaceIsNewestInListDetailSearchAndIndex(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		placeRecord("p1", "Alpha Grill", "food.restaurant", "paducah", geoCenter.Lat, geoCenter.Lng, 10, map[string]any{"description": "smoked brisket"}),
		placeRecord("p2", "Beta Books", "shop.books", "paducah", kmNorth(1), geoCenter.Lng, 50, nil),
	})
	key := s.key()
	rows, _ := s.get(key, "/api/data/places?town=paducah").rows(t)
	if !slices.Equal(ids(rows), []string{"p2", "p1"}) {
		t.Fatalf("before: %v", ids(rows))
	}
	s.importRecords(placeRecord("p1", "Omega Cafe", "food.cafe", "frankfort", 38.2009, -84.8733, 100, map[string]any{"description": "pour over coffee"}))
	key = s.key()
	d, _ := s.get(key, "/api/data/places/p1").object(t)
	if d["name"] != "Omega Cafe" || d["town_slug"] != "frankfort" || d["category"] != "food.cafe" || d["rating_count"] != 100.0 {
		t.Fatalf("detail %v", d)
	}
	for q, want := range map[string][]string{"alpha": nil, "brisket": nil, "omega": {"p1"}, "coffee": {"p1"}} {
		rows, _ := s.get(key, "/api/data/places?q="+q).rows(t)
		if !slices.Equal(ids(rows), want) && !(len(want) == 0 && len(rows) == 0) {
			t.Fatalf("q=%s: %v want %v", q, ids(rows), want)
		}
	}
	rows, _ = s.get(key, "/api/data/places?town=paducah").rows(t)
	if !slices.Equal(ids(rows), []string{"p2"}) {
		t.Fatalf("old town: %v", ids(rows))
	}
	rows, _ = s.get(key, "/api/data/places?town=frankfort").rows(t)
	if !slices.Equal(ids(rows), []string{"p1"}) || rows[0]["name"] != "Omega Cafe" {
		t.Fatalf("new town: %v", rows)
	}
	rows, _ = s.get(key, "/api/data/places").rows(t)
	if !slices.Equal(ids(rows), []string{"p1", "p2"}) {
		t.Fatalf("by new rating_count: %v", ids(rows))
	}
	rows, _ = s.get(key, fmt.Sprintf("/api/data/search?lat=%v&lng=%v&radius=0.5", geoCenter.Lat, geoCenter.Lng)).rows(t)
	if len(rows) != 0 {
		t.Fatalf("old location: %v", ids(rows))
	}
	rows, _ = s.get(key, "/api/data/search?lat=38.2009&lng=-84.8733&radius=1").rows(t)
	if !slices.Equal(ids(rows), []string{"p1"}) {
		t.Fatalf("new location: %v", ids(rows))
	}
}

func TestRenamedOutOfAChainNameIsAGemAgain(t *testing.T) {
	gem := map[string]any{"is_gem": true, "local_gem_score": 0.9}
	s := newProjectedStack(t, []map[string]any{
		placeRecord("b1", "Burger Barn", "food.restaurant", "paducah", 37.08, -88.6, 10, gem),
		placeRecord("b2", "Burger Barn #2", "food.restaurant", "paducah", 37.09, -88.6, 10, gem),
		placeRecord("b3", "BURGER BARN", "food.restaurant", "frankfort", 38.2, -84.87, 10, gem),
	})
	key := s.key()
	items, _ := s.get(key, "/api/data/hidden-gems").rows(t)
	if len(items) != 0 {
		t.Fatalf("chain by name: %v", ids(items))
	}
	s.importRecords(placeRecord("b3", "Barn Burger Shack", "food.restaurant", "frankfort", 38.2, -84.87, 10, gem))
	key = s.key()
	items, _ = s.get(key, "/api/data/hidden-gems").rows(t)
	if got := ids(items); !slices.Equal(got, []string{"b1", "b2", "b3"}) {
		t.Fatalf("after rename: %v", got)
	}
}

// ---------------------------------------------------------------------------------------------
// field_trust

func trustOf(t *testing.T, s *projectedStack, key, id, field string) map[string]any {
	t.Helper()
	d, _ := s.get(key, "/api/data/places/"+id).object(t)
	ft, ok := d["field_trust"].(map[string]any)
	if !ok {
		t.Fatalf("field_trust %v", d["field_trust"])
	}
	e, _ := ft[field].(map[string]any)
	return e
}

func TestFieldTrustTiers(t *testing.T) {
	now := start
	day := 24 * time.Hour
	cases := []struct {
		name string
		obs  []any
		want string
	}{
		{"three agree fresh", []any{obs("a", "x", now.Add(-10*day)), obs("b", "X", now.Add(-20*day)), obs("c", " x ", now.Add(-30*day))}, "verified"},
		{"two agree", []any{obs("a", "x", now.Add(-10*day)), obs("b", "x", now.Add(-20*day))}, "supported"},
		{"one source", []any{obs("a", "x", now.Add(-10*day))}, "thin"},
		{"one source twice", []any{obs("a", "x", now.Add(-10*day)), obs("a", "x", now.Add(-20*day))}, "thin"},
		{"disagree", []any{obs("a", "x", now.Add(-10*day)), obs("b", "y", now.Add(-20*day))}, "low"},
		{"stale", []any{obs("a", "x", now.Add(-400*day)), obs("b", "x", now.Add(-400*day)), obs("c", "x", now.Add(-400*day))}, "low"},
	}
	var recs []map[string]any
	for i, c := range cases {
		recs = append(recs, placeRecord(fmt.Sprint("t", i), "Trust "+fmt.Sprint(i), "food.cafe", "paducah", 0, 0, 1,
			map[string]any{"sources": map[string]any{"seo_description": c.obs}}))
	}
	s := newProjectedStack(t, recs)
	key := s.key()
	for i, c := range cases {
		e := trustOf(t, s, key, fmt.Sprint("t", i), "seo_description")
		if e == nil || e["trustTier"] != c.want {
			t.Errorf("%s: %v want %s", c.name, e, c.want)
		}
	}
	d, _ := s.get(key, "/api/data/places/t0").object(t)
	ft := d["field_trust"].(map[string]any)
	for _, f := range domain.TrustScoredFields {
		if f == "seo_description" {
			continue // observed
		}
		if v, ok := ft[f]; !ok || v != nil {
			t.Errorf("unobserved %s: %v (present %v)", f, v, ok)
		}
	}
}

// A stored detail is re-rendered when its trust window ends: across the 365-day turn, with
// two fields turning at different instants, and with sub-microsecond observation times.
func TestStoredTrustWindowTurnsAtEveryBoundary(t *testing.T) {
	day := 24 * time.Hour
	n1 := start.Add(-100*day + 500*time.Nanosecond)  // phone: 3 agree
	n2 := start.Add(-150*day + 1500*time.Nanosecond) // website: 2 agree
	s := newProjectedStack(t, []map[string]any{placeRecord("w", "Window", "food.cafe", "paducah", 0, 0, 1, map[string]any{
		"phone": "859-555-0100", "website": "https://w.example",
		"sources": map[string]any{
			"phone":   []any{obs("a", "859-555-0100", n1), obs("b", "8595550100", n1), obs("c", "(859) 555-0100", n1)},
			"website": []any{obs("a", "https://w.example", n2), obs("b", "http://www.w.example/", n2)},
		},
	})})
	expect := func(at time.Time, phone, website string) {
		t.Helper()
		s.clock.Advance(at.Sub(s.clock.Now()))
		key := s.key()
		p := trustOf(t, s, key, "w", "phone")["trustTier"]
		w := trustOf(t, s, key, "w", "website")["trustTier"]
		if p != phone || w != website {
			t.Errorf("at %s: phone %v website %v, want %s %s", at.Format(time.RFC3339Nano), p, w, phone, website)
		}
	}
	expect(n1.Add(180*day), "verified", "supported")
	expect(n1.Add(180*day+time.Nanosecond), "supported", "supported")
	expect(n2.Add(365*day), "supported", "supported")
	expect(n2.Add(365*day+time.Nanosecond), "supported", "low")
	expect(n1.Add(365*day), "supported", "low")
	expect(n1.Add(365*day+time.Microsecond), "low", "low")
}

// ---------------------------------------------------------------------------------------------
// Place list relevance

// docs/api.md, "Places": with q, rows come in relevance order, and "Names weigh more than
// descriptions in the relevance order".
func TestANameMatchOutranksADescriptionMatch(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		placeRecord("a-name", "Old Kentucky Bourbon Barrel Tavern and Smokehouse Grill", "food.bar", "paducah", 0, 0, 1, nil),
		placeRecord("b-desc", "Zed Tap", "food.bar", "paducah", 0, 0, 1, map[string]any{"description": "Bourbon."}),
	})
	key := s.key()
	rows, _ := s.get(key, "/api/data/places?q=bourbon").rows(t)
	if got := ids(rows); !slices.Equal(got, []string{"a-name", "b-desc"}) {
		t.Fatalf("q=bourbon: %v, want the name match first", got)
	}
	rows, _ = s.get(key, "/api/data/places?q=bourb").rows(t)
	if got := ids(rows); !slices.Equal(got, []string{"a-name", "b-desc"}) {
		t.Fatalf("q=bourb: %v, want the name match first", got)
	}
}

// "Names weigh more than descriptions" holds whatever the description: a short one that says
// the word twice, among places that do not say it at all, does not outrank a long name that
// holds it once.
func TestANameMatchOutranksADescriptionThatRepeatsTheWord(t *testing.T) {
	records := []map[string]any{
		placeRecord("a-name", "Old Kentucky Bourbon Barrel Tavern and Smokehouse Grill", "food.bar", "paducah", 0, 0, 1,
			map[string]any{"description": "A tavern on Main Street serving smoked meats, local beer and live music on weekends."}),
		placeRecord("b-desc", "Zed Tap", "food.bar", "paducah", 0, 0, 1, map[string]any{"description": "Bourbon tastings and bourbon flights."}),
	}
	for i := range 30 {
		records = append(records, placeRecord(fmt.Sprintf("other-%02d", i), "Corner Cafe", "food.cafe", "paducah", 0, 0, 1, map[string]any{"description": "Coffee."}))
	}
	s := newProjectedStack(t, records)
	key := s.key()
	for _, q := range []string{"bourbon", "bourb", "BOURBON bourbon"} {
		rows, _ := s.get(key, "/api/data/places?q="+url.QueryEscape(q)).rows(t)
		if got := ids(rows); !slices.Equal(got, []string{"a-name", "b-desc"}) {
			t.Fatalf("q=%s: %v, want the name match first", q, got)
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Trending from real metered requests

func TestTrendingCountsMeteredRequestsOfTheTrailingSevenUTCDays(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		placeRecord("p1", "One", "food.cafe", "paducah", 37.08, -88.6, 1, map[string]any{"menu": []any{map[string]any{"name": "Tea"}}}),
		placeRecord("p2", "Two", "food.cafe", "paducah", 37.09, -88.6, 2, nil),
		placeRecord("p3", "Three", "food.cafe", "paducah", 37.10, -88.6, 3, nil),
		placeRecord("p4", "Four", "food.cafe", "paducah", 37.11, -88.6, 400, nil),
	})
	// 7 days ago, at 23:59 UTC: outside the trailing 7 days (today and the 6 before).
	s.clock.Advance(-7*24*time.Hour + 11*time.Hour + 59*time.Minute)
	key := s.key()
	for i := 0; i < 5; i++ {
		s.get(key, "/api/data/places/p1")
	}
	// 6 days ago, at 00:00 UTC: inside.
	s.clock.Advance(time.Minute)
	for i := 0; i < 3; i++ {
		s.get(key, "/api/data/places/p2") // one charged, two deduplicated: all count
	}
	s.get(key, "/api/data/places/p1/menu")
	s.clock.Advance(6*24*time.Hour + 12*time.Hour)
	s.get(key, "/api/data/places/p3/related")
	s.get(key, "/api/data/places?town=paducah") // list rows are not usage
	s.catchUp()
	items, _ := s.get(s.key(), "/api/data/trending").rows(t)
	got := []string{}
	for _, it := range items {
		got = append(got, fmt.Sprintf("%s:%v", it["place_id"], it["requests_7d"]))
	}
	want := []string{"p2:3", "p3:1", "p1:1", "p4:0"} // ties by rating_count
	if !slices.Equal(got, want) {
		t.Fatalf("trending %v, want %v", got, want)
	}
}

// ---------------------------------------------------------------------------------------------
// Events, geo edges

func TestEventsWindowIsInclusiveAndSortedByStart(t *testing.T) {
	ev := func(id, start, town string) map[string]any {
		return map[string]any{"record": "event", "event_id": id, "title": id, "start_date": start, "town_slug": town}
	}
	// start is 2025-06-15T12:00Z; default window 2025-06-15 .. 2025-09-13 inclusive.
	s := newProjectedStack(t, []map[string]any{
		ev("e-yesterday", "2025-06-14T23:59:59Z", "paducah"),
		ev("e-today-early", "2025-06-15T00:00:00Z", "paducah"),
		ev("e-b", "2025-06-20T10:00:00Z", "paducah"),
		ev("e-a", "2025-06-20T10:00:00Z", "bowling-green"),
		ev("e-last", "2025-09-13T23:59:59Z", "paducah"),
		ev("e-after", "2025-09-14T00:00:00Z", "paducah"),
	})
	key := s.key()
	rows, _ := s.get(key, "/api/data/events").rows(t)
	if got := idsOf(rows, "event_id"); !slices.Equal(got, []string{"e-today-early", "e-a", "e-b", "e-last"}) {
		t.Fatalf("default window: %v", got)
	}
	rows, _ = s.get(key, "/api/data/events?from=2025-06-20&to=2025-06-20").rows(t)
	if got := idsOf(rows, "event_id"); !slices.Equal(got, []string{"e-a", "e-b"}) {
		t.Fatalf("one day: %v", got)
	}
	rows, _ = s.get(key, "/api/data/events?town=bowling%20green&from=2025-06-01&to=2025-12-31").rows(t)
	if got := idsOf(rows, "event_id"); !slices.Equal(got, []string{"e-a"}) {
		t.Fatalf("town alias: %v", got)
	}
	if rows[0]["event_type"] != "other" || rows[0]["end_date"] != nil || rows[0]["venue_place_id"] != nil {
		t.Fatalf("event shape %v", rows[0])
	}
}

// Events are "Sorted by start_date", as served. The import now refuses a start_date finer than
// a microsecond (docs/limits.md), but events imported before keep their nanoseconds in the
// stored document, which is what is served, while the read model's column holds microseconds:
// ordered by the column, ties then by event_id, an event that starts later came first.
func TestEventsImportedToTheNanosecondAreSortedByTheStartDateServed(t *testing.T) {
	s := newProjectedStack(t, nil)
	town := "paducah"
	var events []domain.CalendarEvent
	for _, e := range []struct{ id, start string }{
		{"a-later", "2025-06-20T10:00:00.000000900Z"},
		{"b-earlier", "2025-06-20T10:00:00.000000100Z"},
		{"c-first", "2025-06-20T09:59:59.999999999Z"},
	} {
		at, err := time.Parse(time.RFC3339Nano, e.start)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, domain.CalendarEvent{EventID: e.id, Title: e.id, EventType: "other", StartDate: at, TownSlug: &town})
	}
	// Appended as the import wrote them before it checked the precision.
	if err := s.store.WithTx(ctx, func(tx pgx.Tx) error {
		for _, e := range events {
			heads, err := eventstore.OpenHeads(ctx, tx, true, domain.CalendarEventStream(e.EventID))
			if err != nil {
				return err
			}
			if _, err := eventstore.Append(ctx, tx, heads[domain.CalendarEventStream(e.EventID)], s.clock.Now(),
				eventstore.NewEvent{Type: domain.EventCalendarEventImported, Payload: e}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.catchUp()
	rows, _ := s.get(s.key(), "/api/data/events?from=2025-06-20&to=2025-06-20").rows(t)
	var served []string
	for _, r := range rows {
		served = append(served, fmt.Sprintf("%s %s", r["start_date"], r["event_id"]))
	}
	want := []string{"2025-06-20T09:59:59.999999999Z c-first", "2025-06-20T10:00:00.0000001Z b-earlier", "2025-06-20T10:00:00.0000009Z a-later"}
	if !slices.Equal(served, want) {
		t.Fatalf("events served %q, want them sorted by the start_date served: %q", served, want)
	}
}

func TestGeoSearchIncludesAPlaceExactlyOnTheRadius(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		placeRecord("edge", "Edge", "food.cafe", "paducah", kmNorth(2), geoCenter.Lng+0.01, 1, nil),
		placeRecord("near", "Near", "food.cafe", "paducah", kmNorth(1), geoCenter.Lng, 1, nil),
		placeRecord("twin-b", "Twin B", "food.cafe", "paducah", kmNorth(0.5), geoCenter.Lng, 1, nil),
		placeRecord("twin-a", "Twin A", "food.cafe", "paducah", kmNorth(0.5), geoCenter.Lng, 1, nil),
	})
	key := s.key()
	rows, _ := s.get(key, fmt.Sprintf("/api/data/search?lat=%v&lng=%v&radius=10", geoCenter.Lat, geoCenter.Lng)).rows(t)
	if got := ids(rows); !slices.Equal(got, []string{"twin-a", "twin-b", "near", "edge"}) {
		t.Fatalf("order: %v", got)
	}
	r := rows[3]["distance_km"].(float64)
	rows, _ = s.get(key, fmt.Sprintf("/api/data/search?lat=%v&lng=%v&radius=%s", geoCenter.Lat, geoCenter.Lng, strconvG(r))).rows(t)
	if got := ids(rows); len(got) != 4 {
		t.Fatalf("radius exactly the distance %v: %v", r, got)
	}
	rows, _ = s.get(key, fmt.Sprintf("/api/data/search?lat=%v&lng=%v&radius=10&limit=2&offset=1", geoCenter.Lat, geoCenter.Lng)).rows(t)
	if got := ids(rows); !slices.Equal(got, []string{"twin-b", "near"}) {
		t.Fatalf("page: %v", got)
	}
}

func strconvG(f float64) string { b, _ := json.Marshal(f); return string(b) }

func TestSameIDInTwoFilesOfOneImportKeepsTheLater(t *testing.T) {
	s := newProjectedStack(t, nil)
	files := []string{
		ndjson(t, []map[string]any{placeRecord("d", "First Name", "food.cafe", "paducah", 37.08, -88.6, 1, nil)}),
		ndjson(t, []map[string]any{placeRecord("d", "Second Name", "food.cafe", "paducah", 37.08, -88.6, 1, nil),
			placeRecord("d", "Third Name", "food.cafe", "paducah", 37.08, -88.6, 1, nil)}),
	}
	_, err := (commands.ImportCatalog{Store: s.store, Clock: s.clock.Now}).HandleBatches(ctx, len(files), func(i int) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(files[i])), nil
	}, eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	s.catchUp()
	key := s.key()
	d, _ := s.get(key, "/api/data/places/d").object(t)
	rows, _ := s.get(key, "/api/data/places?q=third").rows(t)
	if d["name"] != "Third Name" || len(rows) != 1 {
		t.Fatalf("detail %v, q=third %v", d["name"], ids(rows))
	}
}

func TestHiddenGemsScoreThresholdAndNormalizedChainNames(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		placeRecord("g-07", "Exactly Point Seven", "food.cafe", "paducah", 0, 0, 1, map[string]any{"local_gem_score": 0.7}),
		placeRecord("g-069", "Just Below", "food.cafe", "paducah", 0, 0, 1, map[string]any{"local_gem_score": 0.69}),
		placeRecord("g-flag", "Flagged Gem", "food.cafe", "paducah", 0, 0, 1, map[string]any{"is_gem": true}),
		placeRecord("j1", "Joe's Diner #12", "food.diner", "paducah", 0, 0, 1, map[string]any{"is_gem": true, "local_gem_score": 0.95}),
		placeRecord("j2", "JOES DINER", "food.diner", "frankfort", 0, 0, 1, map[string]any{"is_gem": true, "local_gem_score": 0.95}),
		placeRecord("j3", "Joe’s  Diner No. 3", "food.diner", "berea", 0, 0, 1, map[string]any{"is_gem": true, "local_gem_score": 0.95}),
	})
	items, _ := s.get(s.key(), "/api/data/hidden-gems").rows(t)
	if got := ids(items); !slices.Equal(got, []string{"g-07", "g-flag"}) {
		t.Fatalf("hidden gems %v", got)
	}
}

// A name with no letter or digit ("🍕", "☕") normalizes to the empty name, which is no
// chain's: three different such gems, none marked is_chain, are all hidden gems (docs/api.md,
// "Hidden gems"). They were taken for one chain of the empty name.
func TestThreeNamesWithoutALetterAreNotAChain(t *testing.T) {
	gem := map[string]any{"is_gem": true, "local_gem_score": 0.9}
	s := newProjectedStack(t, []map[string]any{
		placeRecord("pizza", "🍕", "food.pizza", "paducah", 37.08, -88.6, 10, gem),
		placeRecord("burger", "🍔", "food.burger", "paducah", 37.09, -88.6, 10, gem),
		placeRecord("coffee", "☕!", "food.cafe", "paducah", 37.10, -88.6, 10, gem),
	})
	items, _ := s.get(s.key(), "/api/data/hidden-gems").rows(t)
	if got := ids(items); !slices.Equal(got, []string{"burger", "coffee", "pizza"}) {
		t.Fatalf("hidden gems = %v; want the three gems (three different names, none marked is_chain)", got)
	}
}

func TestRelatedAtMostTenNearestFirstNeverItself(t *testing.T) {
	recs := []map[string]any{placeRecord("src", "Source", "food.cafe", "paducah", geoCenter.Lat, geoCenter.Lng, 1, nil),
		placeRecord("same-spot", "Same Spot", "food.bar", "paducah", geoCenter.Lat, geoCenter.Lng, 1, nil),
		placeRecord("shop", "Shop", "shop.books", "paducah", kmNorth(0.1), geoCenter.Lng, 1, nil),
		placeRecord("foodtruck", "Truck", "foodtruck", "paducah", kmNorth(0.1), geoCenter.Lng, 1, nil)}
	for i := 1; i <= 12; i++ {
		recs = append(recs, placeRecord(fmt.Sprintf("f%02d", i), fmt.Sprint("F", i), "food.restaurant", "paducah", kmNorth(float64(i)), geoCenter.Lng, 1, nil))
	}
	s := newProjectedStack(t, recs)
	items, _ := s.get(s.key(), "/api/data/places/src/related").rows(t)
	want := []string{"same-spot", "f01", "f02", "f03", "f04", "f05", "f06", "f07", "f08", "f09"}
	if got := ids(items); !slices.Equal(got, want) {
		t.Fatalf("related %v", got)
	}
}

// Related places have no radius (docs/api.md): with fewer than ten of its top-level category
// within 50 km, the nearest ones farther away are related too, nearest first.
func TestRelatedFindsTheNearestOfItsCategoryHoweverFar(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		placeRecord("src", "Source", "food.cafe", "paducah", geoCenter.Lat, geoCenter.Lng, 1, nil),
		placeRecord("n30", "Thirty", "food.bar", "paducah", kmNorth(30), geoCenter.Lng, 1, nil),
		placeRecord("n10", "Ten", "food", "paducah", kmNorth(10), geoCenter.Lng, 1, nil),
		placeRecord("far400", "Four hundred", "food.restaurant", "paducah", kmNorth(400), geoCenter.Lng, 1, nil),
		placeRecord("far120", "Hundred twenty", "food.restaurant", "paducah", kmNorth(120), geoCenter.Lng, 1, nil),
		placeRecord("shop60", "Shop", "shop.books", "paducah", kmNorth(60), geoCenter.Lng, 1, nil),
	})
	account, key := s.customer(500)
	items, m := s.get(key, "/api/data/places/src/related").rows(t)
	if got, want := ids(items), []string{"n10", "n30", "far120", "far400"}; !slices.Equal(got, want) {
		t.Fatalf("related %v, want %v", got, want)
	}
	if d := items[3]["distance_km"].(float64); math.Abs(d-400) > 0.01 || items[3]["reason"] != "same category, 400.0 km away" {
		t.Errorf("farthest related %v", items[3])
	}
	if m.CreditsUsed != 2 || s.balance(account) != 998 {
		t.Errorf("related charged %d credits, balance %d; want 2 and 998", m.CreditsUsed, s.balance(account))
	}
}

// The place list's q searches the name, the category and the description (docs/api.md), not
// the SEO description: a word found only there matches nothing, and nothing is charged.
func TestQDoesNotMatchAWordOnlyInTheSEODescription(t *testing.T) {
	s := newProjectedStack(t, []map[string]any{
		placeRecord("plc_seo", "Plain Shop", "shop.misc", "frankfort", 38.2, -84.87, 5,
			map[string]any{"seo_description": "famous for zanzibarique pastries"}),
		placeRecord("plc_desc", "Other Shop", "shop.misc", "frankfort", 38.2, -84.871, 5,
			map[string]any{"description": "zanzibarique tarts", "seo_description": "nothing to see"}),
	})
	account, key := s.customer(500)
	rows, m := s.get(key, "/api/data/places?q=zanzibarique").rows(t)
	if got := ids(rows); !slices.Equal(got, []string{"plc_desc"}) || m.CreditsUsed != 1 {
		t.Errorf("q=zanzibarique: rows %v, %d credits; want [plc_desc] (the word is only in plc_seo's SEO description), 1", got, m.CreditsUsed)
	}
	if rows, m := s.get(key, "/api/data/places?q=famous").rows(t); len(rows) != 0 || m.CreditsUsed != 0 {
		t.Errorf("q=famous: rows %v, %d credits; want none", ids(rows), m.CreditsUsed)
	}
	if b := s.balance(account); b != 999 {
		t.Errorf("balance %d, want 999", b)
	}
}

// The catalog projection of another process, whose clock runs ahead, rendered the detail past a
// turn the request's instant has not reached yet.
func TestTrustIsOfTheRequestInstantWhenTheProjectionClockRunsAhead(t *testing.T) {
	day := 24 * time.Hour
	n := start.Add(-179 * day)
	s := newProjectedStack(t, nil)
	ahead := func() time.Time { return s.clock.Now().Add(2 * day) }
	s.projs = projections.All(s.pool, s.api.Index, ahead)
	s.importRecords(placeRecord("a", "Ahead", "food.cafe", "paducah", 0, 0, 1, map[string]any{"phone": "1", "sources": map[string]any{
		"phone": []any{obs("a", "1", n), obs("b", "1", n), obs("c", "1", n)}}}))
	if got := trustOf(t, s, s.key(), "a", "phone")["trustTier"]; got != "verified" {
		t.Fatalf("phone %v at 179 days", got)
	}
	s.clock.Advance(-200 * day)
	if got := trustOf(t, s, s.key(), "a", "phone")["trustTier"]; got != "verified" {
		t.Fatalf("phone %v before the observation", got)
	}
}
