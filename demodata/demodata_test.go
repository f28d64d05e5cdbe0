package demodata

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var today = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

type catalog struct {
	stats  Stats
	towns  []map[string]any
	places []map[string]any
	events []map[string]any
}

// generate writes a catalog and parses it back, failing on any line that is not a
// JSON object with a known record kind in the town, place, event order.
func generate(t *testing.T, cfg Config) catalog {
	t.Helper()
	var buf bytes.Buffer
	stats, err := Write(&buf, cfg)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	c := catalog{stats: stats}
	order := map[string]int{"town": 0, "place": 1, "event": 2}
	last := 0
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v", n, err)
		}
		if !strings.HasPrefix(sc.Text(), `{"record":`) {
			t.Fatalf("line %d does not start with record: %.60s", n, sc.Text())
		}
		kind, _ := rec["record"].(string)
		pos, ok := order[kind]
		if !ok {
			t.Fatalf("line %d has record %q", n, rec["record"])
		}
		if pos < last {
			t.Fatalf("line %d: %s after a later record kind", n, kind)
		}
		last = pos
		switch kind {
		case "town":
			c.towns = append(c.towns, rec)
		case "place":
			c.places = append(c.places, rec)
		case "event":
			c.events = append(c.events, rec)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if stats.Towns != len(c.towns) || stats.Places != len(c.places) || stats.Events != len(c.events) {
		t.Fatalf("stats %+v do not match the %d towns, %d places, %d events written", stats, len(c.towns), len(c.places), len(c.events))
	}
	return c
}

func digest(t *testing.T, cfg Config) [32]byte {
	t.Helper()
	h := sha256.New()
	if _, err := Write(h, cfg); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

func TestTheSameConfigWritesByteIdenticalOutput(t *testing.T) {
	cfg := Config{Places: 3000, Seed: 7, Today: today}
	if digest(t, cfg) != digest(t, cfg) {
		t.Fatal("two runs with the same config differ")
	}
	// The time of day of Today does not matter, only the date.
	later := cfg
	later.Today = today.Add(15 * time.Hour)
	if digest(t, cfg) != digest(t, later) {
		t.Fatal("the time of day of Today changed the output")
	}
}

func TestADifferentSeedWritesADifferentCatalog(t *testing.T) {
	a := digest(t, Config{Places: 1000, Seed: 1, Today: today})
	b := digest(t, Config{Places: 1000, Seed: 2, Today: today})
	if a == b {
		t.Fatal("seeds 1 and 2 wrote the same catalog")
	}
}

func TestZeroPlacesAndSeedMeanTheDefaults(t *testing.T) {
	stats, err := Write(io.Discard, Config{Today: today})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Places != DefaultPlaces {
		t.Errorf("Places = %d, want %d", stats.Places, DefaultPlaces)
	}
	if digest(t, Config{Places: 500, Today: today}) != digest(t, Config{Places: 500, Seed: 1, Today: today}) {
		t.Error("seed 0 does not behave as seed 1")
	}
}

func TestWriteRefusesAMissingTodayOrNegativePlaces(t *testing.T) {
	if _, err := Write(io.Discard, Config{Places: 10}); err == nil {
		t.Error("no error without Today")
	}
	if _, err := Write(io.Discard, Config{Places: -1, Today: today}); err == nil {
		t.Error("no error for negative Places")
	}
}

func TestTownsAreThe418KentuckyTownsWithUniqueSlugs(t *testing.T) {
	towns := Towns()
	if len(towns) != 418 {
		t.Fatalf("Towns() has %d towns, want 418", len(towns))
	}
	seen := map[string]bool{}
	for _, tw := range towns {
		if seen[tw.Slug] {
			t.Errorf("slug %q repeats", tw.Slug)
		}
		seen[tw.Slug] = true
		if tw.Lat < 36.4 || tw.Lat > 39.2 || tw.Lng < -89.6 || tw.Lng > -81.9 {
			t.Errorf("%s at %v,%v is outside Kentucky", tw.Slug, tw.Lat, tw.Lng)
		}
	}
	berea := slices.IndexFunc(towns, func(t Town) bool { return t.Slug == "berea" })
	if b := towns[berea]; b.Name != "Berea" || b.County != "Madison" || b.Population != 15539 {
		t.Errorf("berea = %+v", b)
	}

	c := generate(t, Config{Places: 500, Today: today})
	if len(c.towns) != 418 {
		t.Fatalf("%d town records, want 418", len(c.towns))
	}
	for i, rec := range c.towns {
		if rec["slug"] != towns[i].Slug || rec["name"] != towns[i].Name || rec["county"] != towns[i].County ||
			rec["population"] != float64(towns[i].Population) {
			t.Errorf("town record %v does not match %+v", rec, towns[i])
		}
	}
}

func TestPlaceCountMatchesConfigWithUniqueURLSafeIDs(t *testing.T) {
	for _, n := range []int{1, 50, 5000} {
		c := generate(t, Config{Places: n, Today: today})
		if len(c.places) != n {
			t.Errorf("Places %d: wrote %d places", n, len(c.places))
		}
		id := regexp.MustCompile(`^plc_[0-9a-f]{12}$`)
		seen := map[any]bool{}
		for _, p := range c.places {
			if !id.MatchString(p["place_id"].(string)) {
				t.Fatalf("place_id %q is not plc_ and 12 hex digits", p["place_id"])
			}
			if seen[p["place_id"]] {
				t.Fatalf("place_id %v repeats", p["place_id"])
			}
			seen[p["place_id"]] = true
		}
	}
}

func TestEveryPlaceIsInARealTownWithin25KmOfItsCentre(t *testing.T) {
	towns := map[string]Town{}
	for _, tw := range Towns() {
		towns[tw.Slug] = tw
	}
	c := generate(t, Config{Places: 20000, Seed: 3, Today: today})
	perTown := map[string]int{}
	phone := regexp.MustCompile(`^\+1-(270|502|606|859)-555-01\d\d$`)
	address := regexp.MustCompile(`^\d+ .+, .+, KY (4[0-2]\d{3})$`)
	for _, p := range c.places {
		tw, ok := towns[p["town_slug"].(string)]
		if !ok {
			t.Fatalf("place %v has unknown town_slug %v", p["place_id"], p["town_slug"])
		}
		perTown[tw.Slug]++
		if d := distanceKm(tw.Lat, tw.Lng, p["latitude"].(float64), p["longitude"].(float64)); d > 25 {
			t.Errorf("place %v is %.1f km from the centre of %s", p["place_id"], d, tw.Slug)
		}
		if ph, ok := p["phone"].(string); ok && !phone.MatchString(ph) {
			t.Errorf("phone %q is not a fictional Kentucky number", ph)
		}
		if w, ok := p["website"].(string); ok && (!strings.HasPrefix(w, "https://") || !strings.Contains(w, ".example")) {
			t.Errorf("website %q is not on a .example domain", w)
		}
		if m := address.FindStringSubmatch(p["address"].(string)); m == nil || m[1] < "40003" || m[1] > "42788" {
			t.Errorf("address %q has no Kentucky ZIP code", p["address"])
		}
	}
	if len(perTown) != 418 {
		t.Errorf("%d towns have places, want all 418", len(perTown))
	}
	lou, lex := perTown["louisville-jefferson-county-metro-government-balance"], perTown["lexington-fayette-urban-county"]
	for slug, n := range perTown {
		if n > lex && !strings.HasPrefix(slug, "louisville") || n > lou {
			t.Errorf("%s has %d places, more than Lexington (%d) or Louisville (%d)", slug, n, lex, lou)
		}
	}
}

func distanceKm(lat1, lng1, lat2, lng2 float64) float64 {
	const rad = math.Pi / 180
	a := math.Pow(math.Sin((lat2-lat1)*rad/2), 2) +
		math.Cos(lat1*rad)*math.Cos(lat2*rad)*math.Pow(math.Sin((lng2-lng1)*rad/2), 2)
	return 2 * 6371 * math.Asin(math.Sqrt(a))
}

func TestTheCatalogHasChainsGemsMenusReviewsAndEvents(t *testing.T) {
	c := generate(t, Config{Places: 20000, Today: today})
	chains := map[string]int{}
	names := map[string]int{}
	gems, menus, reviews := 0, 0, 0
	for _, p := range c.places {
		name := p["name"].(string)
		names[name]++
		if p["is_chain"] == true {
			chains[name]++
		}
		if p["is_gem"] == true {
			gems++
			if s, _ := p["local_gem_score"].(float64); s < 0.7 || p["is_chain"] == true {
				t.Errorf("gem %v has score %v and is_chain %v", p["place_id"], p["local_gem_score"], p["is_chain"])
			}
		} else if s, ok := p["local_gem_score"].(float64); ok && s >= 0.7 {
			t.Errorf("non-gem %v has score %v", p["place_id"], s)
		}
		if m, ok := p["menu"].([]any); ok && len(m) > 0 {
			menus++
			if len(m) < 3 || len(m) > 12 {
				t.Errorf("menu of %v has %d items", p["place_id"], len(m))
			}
			if cat := p["category"].(string); !strings.HasPrefix(cat, "food.") && !strings.HasPrefix(cat, "drink.") {
				t.Errorf("a %s has a menu", cat)
			}
		}
		if p["review_summary"] != nil {
			reviews++
		}
	}
	if len(chains) < 5 {
		t.Errorf("%d chain brands, want about 6", len(chains))
	}
	for name, n := range chains {
		if n < 20 {
			t.Errorf("chain %q has only %d locations", name, n)
		}
	}
	repeated := 0
	for name, n := range names {
		if n >= 3 && chains[name] == 0 {
			repeated++
		}
	}
	if repeated == 0 {
		t.Error("no independent name repeats 3 or more times")
	}
	if share := float64(gems) / float64(len(c.places)); share < 0.03 || share > 0.07 {
		t.Errorf("gems are %.1f%% of places, want about 5%%", 100*share)
	}
	if share := float64(reviews) / float64(len(c.places)); share < 0.5 || share > 0.7 {
		t.Errorf("review summaries on %.1f%% of places, want about 60%%", 100*share)
	}
	if menus == 0 || menus != c.stats.Menus || reviews != c.stats.Reviews {
		t.Errorf("menus %d, reviews %d; stats %+v", menus, reviews, c.stats)
	}
	if len(c.events) != EventCount {
		t.Errorf("%d events, want %d", len(c.events), EventCount)
	}
}

func TestEveryEventStartsWithinTheNext120DaysAtAKnownVenue(t *testing.T) {
	c := generate(t, Config{Places: 5000, Today: today.Add(13 * time.Hour)})
	places := map[any]string{}
	for _, p := range c.places {
		places[p["place_id"]] = p["town_slug"].(string)
	}
	atVenue := 0
	prev := ""
	for _, e := range c.events {
		start, err := time.Parse(time.RFC3339, e["start_date"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if start.Before(today) || start.After(today.AddDate(0, 0, 121)) {
			t.Errorf("event %v starts %v, outside the next 120 days", e["event_id"], start)
		}
		if s := e["start_date"].(string); s < prev {
			t.Errorf("events are not in start order at %v", e["event_id"])
		} else {
			prev = s
		}
		if end, ok := e["end_date"].(string); ok && end < e["start_date"].(string) {
			t.Errorf("event %v ends before it starts", e["event_id"])
		}
		if v, ok := e["venue_place_id"].(string); ok {
			atVenue++
			if places[v] == "" || places[v] != e["town_slug"] {
				t.Errorf("event %v is at %v, which is not a place in %v", e["event_id"], v, e["town_slug"])
			}
		}
	}
	if atVenue == 0 {
		t.Error("no event is held at a venue place")
	}
}

func TestSourceObservationsCoverEveryTrustTier(t *testing.T) {
	c := generate(t, Config{Places: 2000, Today: today})
	tiers := map[string]int{}
	for _, p := range c.places {
		for _, obs := range p["sources"].(map[string]any) {
			tiers[trustTier(t, obs.([]any))]++
		}
	}
	for _, want := range []string{"verified", "supported", "thin", "low"} {
		if tiers[want] == 0 {
			t.Errorf("no field is %s; tiers: %v", want, tiers)
		}
	}
}

// trustTier applies the field_trust rule (docs/api.md, "Places") to one field's observations.
func trustTier(t *testing.T, obs []any) string {
	values := map[string]bool{}
	var newest time.Time
	for _, o := range obs {
		o := o.(map[string]any)
		v, _ := json.Marshal(o["value"])
		values[string(v)] = true
		at, err := time.Parse(time.RFC3339, o["observed_at"].(string))
		if err != nil || at.After(today) {
			t.Fatalf("observed_at %v is not a past RFC 3339 time", o["observed_at"])
		}
		if at.After(newest) {
			newest = at
		}
	}
	age := today.Sub(newest)
	switch {
	case len(values) > 1 || age > 365*24*time.Hour:
		return "low"
	case len(obs) >= 3 && age <= 180*24*time.Hour:
		return "verified"
	case len(obs) >= 2:
		return "supported"
	}
	return "thin"
}

func BenchmarkWrite150kPlaces(b *testing.B) {
	for b.Loop() {
		if _, err := Write(io.Discard, Config{Places: 150000, Today: today}); err != nil {
			b.Fatal(err)
		}
	}
}
