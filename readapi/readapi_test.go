package readapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/readapi"
)

func TestAPlacePaidAsAListRowIsFreeAsADetailTheSameDay(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	rows, m := s.get(key, "/api/data/places?town=lexington&limit=1").rows(t)
	if len(rows) != 1 || m.CreditsUsed != 1 || m.CreditsRemaining != 999 || *m.Count != 1 || *m.Deduplicated {
		t.Fatalf("list: rows %v meta %+v", ids(rows), m)
	}
	id := rows[0]["place_id"].(string)

	detail, dm := s.get(key, "/api/data/places/"+id).object(t)
	if detail["place_id"] != id || dm.CreditsUsed != 0 || dm.Deduplicated == nil || !*dm.Deduplicated || dm.CreditsRemaining != 999 {
		t.Fatalf("detail after list: %v meta %+v", detail["place_id"], dm)
	}
}

func TestAListIsCutWhenTheBalanceRunsOutAndCountsTheUnpaidRows(t *testing.T) {
	s := newStack(t)
	_, key := s.customerWithBalance(3)

	rows, m := s.get(key, "/api/data/places?town=lexington&limit=5").rows(t)
	if len(rows) != 3 || m.CreditsUsed != 3 || m.CreditsRemaining != 0 {
		t.Fatalf("rows %v meta %+v", ids(rows), m)
	}
	if m.Partial == nil || !*m.Partial || m.OmittedUnpaid == nil || *m.OmittedUnpaid != 2 || *m.Count != 3 {
		t.Fatalf("meta %+v, want partial with 2 omitted", m)
	}
	// The rows returned are the first three in result order.
	want := []string{"lex-bourbon-bar", "lex-coffee", "lex-bbq"}
	if !slices.Equal(ids(rows), want) {
		t.Fatalf("rows %v, want %v", ids(rows), want)
	}
}

func TestAFixedCostCallOneCreditShortIsRefusedWith402AndCostsNothing(t *testing.T) {
	s := newStack(t)
	account, key := s.customerWithBalance(9)

	r := s.get(key, "/api/data/towns")
	r.expectError(t, http.StatusPaymentRequired, "insufficient_credits")
	if b := s.balance(account); b != 9 {
		t.Fatalf("balance %d after 402, want 9", b)
	}
	// Every metered answer says the balance, a 402 the one it was refused at.
	if got := r.Header.Get("X-Credits-Remaining"); got != "9" {
		t.Errorf("402: X-Credits-Remaining %q, want 9", got)
	}
}

// A place detail, and a list none of whose rows could be paid, refused at zero balance carry
// X-Credits-Remaining: 0, as the spec has every place detail answer carry it.
func TestA402SaysTheBalanceItWasRefusedAt(t *testing.T) {
	s := newStack(t)
	_, key := s.customerWithBalance(0)
	for _, path := range []string{"/api/data/places/lex-coffee", "/api/data/places?town=lexington&limit=5"} {
		r := s.get(key, path)
		r.expectError(t, http.StatusPaymentRequired, "insufficient_credits")
		if got := r.Header.Get("X-Credits-Remaining"); got != "0" {
			t.Errorf("GET %s: 402 with X-Credits-Remaining %q, want 0", path, got)
		}
	}
}

func TestADeduplicatedCallIsFreeEvenAtZeroBalance(t *testing.T) {
	s := newStack(t)
	_, key := s.customerWithBalance(10)

	towns, m := s.get(key, "/api/data/towns").rows(t)
	if len(towns) != 4 || m.CreditsUsed != 10 || m.CreditsRemaining != 0 || *m.Deduplicated {
		t.Fatalf("first towns call: %d towns, meta %+v", len(towns), m)
	}
	if want := []string{"bowling-green", lexington, louisville, "paducah"}; !slices.Equal(idsOf(towns, "slug"), want) {
		t.Fatalf("towns %v, want sorted by slug %v", idsOf(towns, "slug"), want)
	}
	if bg := towns[0]; bg["county"] != nil || bg["population"] != nil {
		t.Fatalf("town without county and population: %v", bg)
	} else if _, ok := bg["county"]; !ok {
		t.Fatalf("county must be an explicit null: %v", bg)
	}

	_, m = s.get(key, "/api/data/towns").rows(t)
	if m.CreditsUsed != 0 || !*m.Deduplicated || m.CreditsRemaining != 0 {
		t.Fatalf("repeat at zero balance: meta %+v", m)
	}
}

func TestGeoSearchReturnsRowsNearestFirstAndLeavesOutPlacesBeyondTheRadius(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	path := "/api/data/search?lat=" + strconv.FormatFloat(geoCenter.Lat, 'f', -1, 64) +
		"&lng=" + strconv.FormatFloat(geoCenter.Lng, 'f', -1, 64) + "&radius=3"
	rows, m := s.get(key, path).rows(t)
	if want := []string{"geo-a", "geo-b", "geo-c"}; !slices.Equal(ids(rows), want) {
		t.Fatalf("rows %v, want %v", ids(rows), want)
	}
	center := placeindex.GeoPoint{Lat: geoCenter.Lat, Lng: geoCenter.Lng}
	if out := placeindex.DistanceKm(center, placeindex.GeoPoint{Lat: kmNorth(3.1), Lng: geoCenter.Lng}); out <= 3 {
		t.Fatalf("geo-out lies %.3f km away; the test needs it outside 3 km", out)
	}
	last := 0.0
	for _, r := range rows {
		d, ok := r["distance_km"].(float64)
		if !ok || d < last || d > 3 {
			t.Fatalf("row %v: distance_km %v after %v", r["place_id"], r["distance_km"], last)
		}
		last = d
	}
	if m.CreditsUsed != 3 || *m.Count != 3 || *m.DeduplicatedCount != 0 {
		t.Fatalf("meta %+v", m)
	}
	// Searching again serves the same rows free: each place was paid today.
	_, m = s.get(key, path).rows(t)
	if m.CreditsUsed != 0 || *m.DeduplicatedCount != 3 || !*m.Deduplicated {
		t.Fatalf("repeat meta %+v", m)
	}
}

func TestOutOfRangeOrMalformedParametersAre400BadRequestAndNotCharged(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)

	for _, path := range []string{
		"/api/data/places?limit=101",
		"/api/data/places?limit=0",
		"/api/data/places?limit=ten",
		"/api/data/places?offset=10001",
		"/api/data/search?lat=38&lng=-84&limit=101",
		"/api/data/search?lng=-84",
		"/api/data/search?lat=91&lng=-84",
		"/api/data/search?lat=38&lng=-181",
		"/api/data/search?lat=north&lng=-84",
		"/api/data/search?lat=38&lng=-84&radius=0",
		"/api/data/search?lat=38&lng=-84&radius=50.5",
		"/api/data/search?lat=37.0834&lng=-0x58.99p0",  // hexadecimal floats: strconv reads -88.6
		"/api/data/search?lat=38&lng=-84&radius=0x3p0", // and 3
		"/api/data/search?lat=0x1.2a0ap%2B5&lng=-84",   // and 37.25
		"/api/data/hidden-gems?limit=51",
		"/api/data/events?from=2025-13-01",
		"/api/data/events?to=15/06/2025",
		"/api/data/events?from=2025-07-01&to=2025-06-30",
	} {
		t.Run(path, func(t *testing.T) {
			r := s.get(key, path)
			r.expectError(t, http.StatusBadRequest, "bad_request")
			if r.Header.Get("X-RateLimit-Limit") == "" {
				t.Errorf("400 without rate-limit headers")
			}
		})
	}
	if b := s.balance(account); b != 1000 {
		t.Fatalf("balance %d after 400s, want 1000", b)
	}
	// The message names the parameter.
	if r := s.get(key, "/api/data/places?limit=101"); !strings.Contains(string(r.Body), "limit") {
		t.Fatalf("400 body does not name the parameter: %s", r.Body)
	}
	// Decimal numbers as JSON writes them, an exponent or a leading + included, are numbers.
	if r := s.get(key, "/api/data/search?lat=3.8e1&lng=-84.&radius=%2B5"); r.Status != http.StatusOK {
		t.Fatalf("lat=3.8e1&lng=-84.&radius=+5: %d %s", r.Status, r.Body)
	}
}

// A parameter longer than its documented maximum (docs/limits.md) is a 400 naming it, whatever
// its content, and costs nothing; one at its maximum is read as usual. Before these limits a
// 3,000-character town made the dedup claim's key too long for its index: a 500.
func TestEveryParameterLongerThanItsLimitIs400NamingItAndNotCharged(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	junk := func(n int) string { // random-looking text of n characters: letters, spaces, %, multibyte
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString([]string{"a", " ", "%", "é", "Z", "-", "9", "&", "東"}[(i*7+i/3)%9])
		}
		return b.String()
	}
	over := map[string]struct{ route, param string }{
		"places town":       {"/api/data/places?", "town"},
		"places q":          {"/api/data/places?", "q"},
		"places limit":      {"/api/data/places?", "limit"},
		"places offset":     {"/api/data/places?", "offset"},
		"search lat":        {"/api/data/search?lng=-84.5&", "lat"},
		"search lng":        {"/api/data/search?lat=38&", "lng"},
		"search radius":     {"/api/data/search?lat=38&lng=-84.5&", "radius"},
		"search limit":      {"/api/data/search?lat=38&lng=-84.5&", "limit"},
		"search offset":     {"/api/data/search?lat=38&lng=-84.5&", "offset"},
		"hidden-gems town":  {"/api/data/hidden-gems?", "town"},
		"hidden-gems limit": {"/api/data/hidden-gems?", "limit"},
		"events town":       {"/api/data/events?", "town"},
		"events from":       {"/api/data/events?", "from"},
		"events to":         {"/api/data/events?", "to"},
	}
	for name, c := range over {
		t.Run(name, func(t *testing.T) {
			limit := readapi.ParamLimits()[c.param]
			for _, n := range []int{limit + 1, 3000} {
				r := s.get(key, c.route+c.param+"="+url.QueryEscape(junk(n)))
				r.expectError(t, http.StatusBadRequest, "bad_request")
				var e struct{ Error string }
				if err := json.Unmarshal(r.Body, &e); err != nil {
					t.Fatal(err)
				}
				if want := strconv.Quote(c.param) + " must be at most " + strconv.Itoa(limit) + " characters"; !strings.Contains(e.Error, want) {
					t.Fatalf("%d characters: error %q does not say %s", n, e.Error, want)
				}
			}
		})
	}
	for _, path := range []string{"/api/data/places/", "/api/data/places/%s/menu", "/api/data/places/%s/reviews", "/api/data/places/%s/related"} {
		long := strings.Repeat("p", readapi.ParamLimits()["placeId"]+1)
		p := strings.Replace(path, "%s", long, 1)
		if !strings.Contains(path, "%s") {
			p += long
		}
		// No place can have such an id (the import caps ids at 128): an unknown place.
		s.get(key, p).expectError(t, http.StatusNotFound, "not_found")
	}
	if b := s.balance(account); b != 1000 {
		t.Fatalf("balance %d after 400s and 404s, want 1000 (nothing charged)", b)
	}

	// At their maximum they are ordinary values: an unknown town lists nothing, an unknown id is 404.
	atMax := strings.Repeat("y", readapi.ParamLimits()["town"])
	if rows, m := s.get(key, "/api/data/places?town="+atMax+"&q="+strings.Repeat("q", readapi.ParamLimits()["q"])).rows(t); len(rows) != 0 || m.CreditsUsed != 0 {
		t.Fatalf("town and q at their maximum: %d rows, meta %+v", len(rows), m)
	}
	// The maximum counts characters, as the OpenAPI document's maxLength does, not bytes.
	if rows, m := s.get(key, "/api/data/places?q="+url.QueryEscape(strings.Repeat("é", readapi.ParamLimits()["q"]))).rows(t); len(rows) != 0 || m.CreditsUsed != 0 {
		t.Fatalf("q of %d two-byte characters: %d rows, meta %+v", readapi.ParamLimits()["q"], len(rows), m)
	}
	if _, m := s.get(key, "/api/data/events?town="+atMax).rows(t); m.CreditsUsed != 5 {
		t.Fatalf("events with a town at its maximum: meta %+v, want 5 credits", m)
	}
	s.get(key, "/api/data/places/"+strings.Repeat("p", readapi.ParamLimits()["placeId"])).expectError(t, http.StatusNotFound, "not_found")
}

func TestAMissingKeyIs401MissingAPIKey(t *testing.T) {
	s := newStack(t)
	s.get("", "/api/data/towns").expectError(t, http.StatusUnauthorized, "missing_api_key")
}

func TestAnUnknownKeyIs401InvalidAPIKey(t *testing.T) {
	s := newStack(t)
	unknown, err := domain.NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	s.get(unknown, "/api/data/towns").expectError(t, http.StatusUnauthorized, "invalid_api_key")
	s.get("svc_live_not-a-key", "/api/data/towns").expectError(t, http.StatusUnauthorized, "invalid_api_key")
}

func TestARevokedKeyIs403RevokedAPIKey(t *testing.T) {
	s := newStack(t)
	account, _ := s.customer(500)
	k, err := s.accounts.IssueKey(ctx, account, eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.accounts.RevokeKey(ctx, account, k.KeyID, "compromised", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	s.get(k.APIKey, "/api/data/towns").expectError(t, http.StatusForbidden, "revoked_api_key")
}

// A key revoked a moment ago on another process, before this process's key cache has heard
// of it, still gets 403 ahead of a 400 or 404: errors re-read the key before answering, as the
// contract's order of checks puts the key first.
func TestAKeyRevokedBehindTheCachesBackIs403BeforeA400OrA404(t *testing.T) {
	s := newStack(t)
	s.listenForKeys()
	account, key := s.customer(500)
	rows, _ := s.get(key, "/api/data/places?limit=2").rows(t) // authenticated, and now cached
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	// The revoke's notification has not arrived: the row changes without one.
	if _, err := s.pool.Exec(ctx, `UPDATE api_keys SET state = 'revoked' WHERE account_id = $1`, account); err != nil {
		t.Fatal(err)
	}
	s.get(key, "/api/data/places?limit=101").expectError(t, http.StatusForbidden, "revoked_api_key")
	s.get(key, "/api/data/places/no-such-place").expectError(t, http.StatusForbidden, "revoked_api_key")
	s.get(key, "/api/data/places?town="+strings.Repeat("t", 101)).expectError(t, http.StatusForbidden, "revoked_api_key")
	s.get(key, "/api/data/places/"+ids(rows)[1]).expectError(t, http.StatusForbidden, "revoked_api_key")
	if b := s.balance(account); b != 998 {
		t.Fatalf("balance %d; want 998 (only the first list charged)", b)
	}
}

// The same for a request over its rate limit and one whose body is too large: a 429 or a 413
// is a refusal of the request itself, and the key's 403 comes first (decisions.md: auth, then
// rate limit, then parameters).
func TestAKeyRevokedBehindTheCachesBackIs403BeforeA429OrA413(t *testing.T) {
	s := newStack(t)
	s.listenForKeys()
	account, key := s.customer(500)
	perMinute := int64(2)
	if err := s.accounts.SetRateLimit(ctx, account, &perMinute, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // cached, and its limit used up
		s.get(key, "/api/data/places/no-such-place").expectError(t, http.StatusNotFound, "not_found")
	}
	// The revoke's notification has not arrived: the row changes without one.
	if _, err := s.pool.Exec(ctx, `UPDATE api_keys SET state = 'revoked' WHERE account_id = $1`, account); err != nil {
		t.Fatal(err)
	}
	s.get(key, "/api/data/towns").expectError(t, http.StatusForbidden, "revoked_api_key")

	other, otherKey := s.customer(500)
	s.get(otherKey, "/api/data/towns").rows(t) // cached
	if _, err := s.pool.Exec(ctx, `UPDATE api_keys SET state = 'revoked' WHERE account_id = $1`, other); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, s.server.URL+"/api/data/towns", strings.NewReader(strings.Repeat("x", 65<<10)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+otherKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a revoked key with a 65 KiB body: %d, want 403", resp.StatusCode)
	}
}

// A flood of requests over their limit costs the database a read of the key per second at
// most, not one per refusal: the limit is there to spare it.
func TestAFloodOfRefusalsReadsTheKeyAtMostOnceASecond(t *testing.T) {
	s := newStack(t)
	s.listenForKeys()
	account, key := s.customer(500)
	one := int64(1)
	if err := s.accounts.SetRateLimit(ctx, account, &one, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	s.get(key, "/api/data/places/no-such-place").expectError(t, http.StatusNotFound, "not_found")
	start, before := time.Now(), s.pool.Stat().AcquireCount()
	for range 200 {
		s.get(key, "/api/data/towns").expectError(t, http.StatusTooManyRequests, "rate_limited")
	}
	reads := s.pool.Stat().AcquireCount() - before
	if most := int64(time.Since(start)/time.Second) + 2; reads > most {
		t.Fatalf("200 refusals in %v took %d database connections, want at most %d (one a second)", time.Since(start), reads, most)
	}
}

func TestThe61stRequestInAMinuteIs429WithRetryAfter(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	for i := 1; i <= 60; i++ {
		r := s.get(key, "/api/data/places/no-such-place")
		if r.Status != http.StatusNotFound {
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
		if got := r.Header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(60-i) {
			t.Fatalf("request %d: X-RateLimit-Remaining %q", i, got)
		}
	}
	r := s.get(key, "/api/data/towns")
	r.expectError(t, http.StatusTooManyRequests, "rate_limited")
	if r.Header.Get("Retry-After") != "60" || r.Header.Get("X-RateLimit-Limit") != "60" || r.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("429 headers %v", r.Header)
	}
	if reset := r.Header.Get("X-RateLimit-Reset"); reset != strconv.FormatInt(start.Add(time.Minute).Unix(), 10) {
		t.Fatalf("X-RateLimit-Reset %q, want the end of the window", reset)
	}

	s.clock.Advance(time.Minute)
	if r := s.get(key, "/api/data/towns"); r.Status != http.StatusOK || r.Header.Get("X-RateLimit-Remaining") != "59" {
		t.Fatalf("after the window: %d remaining %q", r.Status, r.Header.Get("X-RateLimit-Remaining"))
	}
}

func TestTheTownAliasLexingtonResolvesToItsCanonicalSlug(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	rows, _ := s.get(key, "/api/data/places?town=Lexington&limit=100").rows(t)
	if len(rows) != 7 {
		t.Fatalf("got %v, want the 7 Lexington places", ids(rows))
	}
	for _, r := range rows {
		if r["town_slug"] != lexington {
			t.Fatalf("row %v in %v", r["place_id"], r["town_slug"])
		}
	}
	rows, _ = s.get(key, "/api/data/places?town=bowling%20green").rows(t)
	if want := []string{"bg-burger-3", "bg-cave"}; !slices.Equal(ids(rows), want) {
		t.Fatalf("bowling green: %v, want %v", ids(rows), want)
	}
	if got := readapi.ResolveTown("LOUISVILLE"); got != louisville {
		t.Fatalf("ResolveTown(LOUISVILLE) = %q", got)
	}
}

func TestTownAndQCombineWithAnd(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	rows, _ := s.get(key, "/api/data/places?q=bourb").rows(t)
	if got := ids(rows); !slices.Contains(got, "lex-bourbon-bar") || !slices.Contains(got, "lou-bourbon") {
		t.Fatalf("q alone: %v", got)
	}
	rows, _ = s.get(key, "/api/data/places?q=bourb&town=lexington").rows(t)
	if want := []string{"lex-bourbon-bar"}; !slices.Equal(ids(rows), want) {
		t.Fatalf("q and town: %v, want %v", ids(rows), want)
	}
}

// Each word of q is a clause every place must match: a word given again asks nothing more
// (and costs nothing more), and a q of more than 16 different words is 400 naming q, before
// anything is searched or charged (docs/limits.md).
func TestAQHoldsAtMost16DifferentWordsAndARepeatedWordCountsOnce(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)

	once, _ := s.get(key, "/api/data/places?q=bourb").rows(t)
	again, _ := s.get(key, "/api/data/places?q="+url.QueryEscape(strings.TrimSpace(strings.Repeat("bourb ", 33)))).rows(t)
	if !slices.Equal(ids(once), ids(again)) || len(once) == 0 {
		t.Fatalf("q=bourb: %v; the same word 33 times: %v", ids(once), ids(again))
	}
	before := s.balance(account)
	words := make([]string, 17)
	for i := range words {
		words[i] = string(rune('a'+i)) + "x"
	}
	r := s.get(key, "/api/data/places?q="+url.QueryEscape(strings.Join(words, " ")))
	r.expectError(t, http.StatusBadRequest, "bad_request")
	if !strings.Contains(string(r.Body), "q") || !strings.Contains(string(r.Body), "16") {
		t.Fatalf("17 different words: %s", r.Body)
	}
	if rows, m := s.get(key, "/api/data/places?q="+url.QueryEscape(strings.Join(words[:16], " "))).rows(t); len(rows) != 0 || m.CreditsUsed != 0 {
		t.Fatalf("16 different words that match nothing: %d rows, %d credits", len(rows), m.CreditsUsed)
	}
	// Counted as the indexes fold them: one word of letters and circled digits ("a⑴b⑵...",
	// "⑴" folds to "(1)") is as many clauses as the words it folds to.
	folded := ""
	for i := range 17 {
		folded += string(rune('a'+i)) + string(rune('⑴'+i%9))
	}
	r = s.get(key, "/api/data/places?q="+url.QueryEscape(folded))
	r.expectError(t, http.StatusBadRequest, "bad_request")
	if !strings.Contains(string(r.Body), "16") {
		t.Fatalf("one word folding to 26 different words: %s", r.Body)
	}
	if b := s.balance(account); b != before {
		t.Fatalf("balance %d after the 400s and the empty list, want %d", b, before)
	}
}

func TestListRowsCarryEveryPlaceFieldButNotTheDetailOnes(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	rows, _ := s.get(key, "/api/data/places?town=lexington&limit=100").rows(t)
	for _, r := range rows {
		for _, f := range []string{"place_id", "name", "category", "town_slug", "latitude", "longitude", "is_gem",
			"local_gem_score", "phone", "website", "rating", "rating_count", "seo_description", "canonical_url"} {
			if _, ok := r[f]; !ok {
				t.Fatalf("row %v lacks %s", r["place_id"], f)
			}
		}
		for _, f := range []string{"hours", "description", "enrichment_tier", "distance_km"} {
			if _, ok := r[f]; ok {
				t.Fatalf("list row %v carries %s", r["place_id"], f)
			}
		}
		if r["canonical_url"] != baseURL+"/places/"+r["place_id"].(string) {
			t.Fatalf("canonical_url %v", r["canonical_url"])
		}
	}
}

func TestPlaceDetailCarriesXCreditsRemainingAndTheDetailFields(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	r := s.get(key, "/api/data/places/lex-bourbon-bar")
	if r.Header.Get("X-Credits-Remaining") != "999" || r.Header.Get("X-Request-Id") == "" {
		t.Fatalf("headers %v", r.Header)
	}
	d, m := r.object(t)
	if m.CreditsUsed != 1 || m.CreditsRemaining != 999 || *m.Deduplicated {
		t.Fatalf("meta %+v", m)
	}
	if d["description"] != "Small batch bourbon and music." || d["enrichment_tier"] != "premium" || d["hours"] == nil {
		t.Fatalf("detail %v", d)
	}
	trust := d["field_trust"].(map[string]any)
	phone, _ := trust["phone"].(map[string]any)
	if phone == nil || phone["trustTier"] != "verified" || phone["sourceCount"] != 3.0 {
		t.Fatalf("phone trust %v", trust["phone"])
	}
	for _, f := range domain.TrustScoredFields {
		if v, ok := trust[f]; f != "phone" && (!ok || v != nil) {
			t.Errorf("%s without observations: %v present=%v, want null", f, v, ok)
		}
	}

	// A place whose stored detail holds for no instant any more (migration 0019), or that has
	// none, is rendered from its document: the same bytes.
	if _, err := s.pool.Exec(ctx, `UPDATE rm_places SET trust_from = NULL, trust_until = '1970-01-01T00:00:00Z'`); err != nil {
		t.Fatal(err)
	}
	if again := s.get(key, "/api/data/places/lex-bourbon-bar"); string(again.Body) != strings.Replace(string(r.Body), `"credits_used":1,"credits_remaining":999,"deduplicated":false`,
		`"credits_used":0,"credits_remaining":999,"deduplicated":true`, 1) {
		t.Errorf("rendered from its document after its window:\n%s\nstored:\n%s", again.Body, r.Body)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE rm_places SET detail_json = NULL, trust_from = NULL, trust_until = NULL`); err != nil {
		t.Fatal(err)
	}
	if again := s.get(key, "/api/data/places/lex-bourbon-bar"); string(again.Body) != strings.Replace(string(r.Body), `"credits_used":1,"credits_remaining":999,"deduplicated":false`,
		`"credits_used":0,"credits_remaining":999,"deduplicated":true`, 1) {
		t.Errorf("rendered from its document:\n%s\nstored:\n%s", again.Body, r.Body)
	}
}

func TestAPlaceWithoutAMenuIs404NoMenuData(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	s.get(key, "/api/data/places/lex-bbq/menu").expectError(t, http.StatusNotFound, "no_menu_data")
	s.get(key, "/api/data/places/lex-bbq/reviews").expectError(t, http.StatusNotFound, "no_review_data")

	items, m := s.get(key, "/api/data/places/lex-bourbon-bar/menu").rows(t)
	if len(items) != 2 || m.CreditsUsed != 3 || items[0]["currency"] != "USD" || items[1]["price"] != nil {
		t.Fatalf("menu %v meta %+v", items, m)
	}
	review, m := s.get(key, "/api/data/places/lex-bourbon-bar/reviews").object(t)
	if review["headline"] != "Cozy bourbon den" || review["place_id"] != "lex-bourbon-bar" || m.CreditsUsed != 2 {
		t.Fatalf("review %v meta %+v", review, m)
	}
}

func TestAnUnknownPlaceIs404NotFoundOnEveryPlaceRoute(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	for _, suffix := range []string{"", "/menu", "/reviews", "/related"} {
		s.get(key, "/api/data/places/no-such-place"+suffix).expectError(t, http.StatusNotFound, "not_found")
	}
}

func TestErrorsAreNotCharged(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)

	s.get(key, "/api/data/events?from=tomorrow").expectError(t, http.StatusBadRequest, "bad_request")
	s.get(key, "/api/data/places/no-such-place").expectError(t, http.StatusNotFound, "not_found")
	s.get(key, "/api/data/places/lex-bbq/menu").expectError(t, http.StatusNotFound, "no_menu_data")
	if b := s.balance(account); b != 1000 {
		t.Fatalf("balance %d after errors, want 1000", b)
	}
}

func TestHiddenGemsLeaveOutChainsAndPutTheBestGemFirst(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	gems, m := s.get(key, "/api/data/hidden-gems").rows(t)
	if want := []string{"lex-bourbon-bar", "lou-bourbon", "lex-coffee"}; !slices.Equal(ids(gems), want) {
		t.Fatalf("gems %v, want %v (no Burger Barn, no Quick Mart)", ids(gems), want)
	}
	if m.CreditsUsed != 5 || *m.Count != 3 {
		t.Fatalf("meta %+v", m)
	}
	gems, _ = s.get(key, "/api/data/hidden-gems?town=louisville&limit=5").rows(t)
	if want := []string{"lou-bourbon"}; !slices.Equal(ids(gems), want) {
		t.Fatalf("louisville gems %v, want %v", ids(gems), want)
	}
}

func TestEventsDefaultToTheNext90DaysAndHonourAnInclusiveWindow(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	events, m := s.get(key, "/api/data/events").rows(t)
	if want := []string{"ev-jazz", "ev-waterfront", "ev-july"}; !slices.Equal(idsOf(events, "event_id"), want) {
		t.Fatalf("default window: %v, want %v", idsOf(events, "event_id"), want)
	}
	if m.CreditsUsed != 5 || events[0]["event_type"] != "music" || events[0]["end_date"] != "2025-06-21T02:00:00Z" {
		t.Fatalf("events %v meta %+v", events[0], m)
	}
	if v, ok := events[1]["venue_place_id"]; !ok || v != nil {
		t.Fatalf("venue_place_id must be an explicit null: %v", events[1])
	}

	events, _ = s.get(key, "/api/data/events?town=lexington&from=2025-06-20&to=2025-07-01").rows(t)
	if want := []string{"ev-jazz", "ev-july"}; !slices.Equal(idsOf(events, "event_id"), want) {
		t.Fatalf("lexington window: %v, want %v", idsOf(events, "event_id"), want)
	}

	// A to before today without a from: the 400 names to, the parameter the client gave.
	r := s.get(key, "/api/data/events?to=2020-01-01")
	r.expectError(t, http.StatusBadRequest, "bad_request")
	if !strings.Contains(string(r.Body), `parameter \"to\" must not be before from, which defaults to today`) {
		t.Errorf("to before the default from: %s", r.Body)
	}
}

func TestRelatedPlacesShareTheTopLevelCategoryNearestFirst(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	items, m := s.get(key, "/api/data/places/lex-bourbon-bar/related").rows(t)
	// Every other food place of the fixture, at any distance: Lexington's, then Louisville's
	// (about 110 km) and Bowling Green's; never the place itself nor the shop.
	want := []string{"lex-burger-1", "lex-coffee", "lex-bbq", "lou-bourbon", "lou-burger-2", "lou-hot-brown", "bg-cave", "bg-burger-3"}
	if got := ids(items); !slices.Equal(got, want) {
		t.Fatalf("related %v, want %v", got, want)
	}
	last := 0.0
	for _, it := range items {
		d := it["distance_km"].(float64)
		if d < last || !strings.HasPrefix(it["category"].(string), "food") || !strings.HasPrefix(it["reason"].(string), "same category, ") {
			t.Fatalf("item %v", it)
		}
		last = d
	}
	if m.CreditsUsed != 2 {
		t.Fatalf("meta %+v", m)
	}

	items, m = s.get(key, "/api/data/places/lex-nocoords/related").rows(t)
	if len(items) != 0 || m.CreditsUsed != 2 {
		t.Fatalf("place without coordinates: %v meta %+v", items, m)
	}
}

func TestTrendingRanksByRequestsOverTheTrailingSevenDays(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)

	items, _ := s.get(key, "/api/data/trending").rows(t)
	if len(items) != 16 || items[0]["place_id"] != "lex-bourbon-bar" || items[1]["place_id"] != "lou-bourbon" {
		t.Fatalf("without usage, by rating_count: %v", ids(items))
	}

	today := start.Truncate(24 * time.Hour)
	if _, err := s.pool.Exec(ctx, `INSERT INTO rm_usage_daily (day, place_id, requests) VALUES
		($1, 'geo-c', 4), ($2, 'geo-c', 3), ($2, 'bg-cave', 5), ($3, 'geo-a', 100)`,
		today, today.AddDate(0, 0, -6), today.AddDate(0, 0, -7)); err != nil {
		t.Fatal(err)
	}
	_, key2 := s.customer(500) // another account: the first one has trending free for today
	items, _ = s.get(key2, "/api/data/trending").rows(t)
	if got := ids(items)[:3]; !slices.Equal(got, []string{"geo-c", "bg-cave", "lex-bourbon-bar"}) {
		t.Fatalf("with usage: %v", ids(items))
	}
	if items[0]["requests_7d"] != 7.0 || items[0]["score"] != 7.0 || items[2]["requests_7d"] != 0.0 {
		t.Fatalf("items %v", items[:3])
	}
}

func TestHealthAndTheOpenAPIDocumentNeedNoKey(t *testing.T) {
	s := newStack(t)
	if r := s.get("", "/healthz"); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"ok"`) {
		t.Fatalf("healthz %d %s", r.Status, r.Body)
	}
	for _, p := range []string{"/healthz", "/openapi.json"} {
		if r := s.unchecked(http.MethodHead, "", p); r.Status != http.StatusOK || len(r.Body) != 0 {
			t.Errorf("HEAD %s without a key: %d %q, want 200 and no body", p, r.Status, r.Body)
		}
	}
	if r := s.get("", "/openapi.json"); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"0.1.0"`) {
		t.Fatalf("openapi.json %d", r.Status)
	}
	// It says the default cap this server was started with (RATE_LIMIT_PER_MINUTE).
	api := s.api
	api.RateLimitPerMinute = 120
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "The default cap is 120 requests per minute per key") {
		t.Errorf("openapi.json of a server whose default cap is 120 does not say so")
	}
}

// Only GET /healthz and GET /openapi.json are served without a key: an unknown route or a
// wrong method is refused by authentication first, then answered 404 or 405, uncharged.
func TestUnknownRoutesAre404AndOtherMethods405AfterAuthentication(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	unknown, err := domain.NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/api/data/nothing-here"},
		{http.MethodGet, "/api/data/places/lex-bourbon-bar/unknown"},
		{http.MethodGet, "/elsewhere"},
		{http.MethodPost, "/api/data/towns"},
	} {
		s.unchecked(c.method, "", c.path).expectError(t, http.StatusUnauthorized, "missing_api_key")
		s.unchecked(c.method, unknown, c.path).expectError(t, http.StatusUnauthorized, "invalid_api_key")
	}
	r := s.unchecked(http.MethodGet, key, "/api/data/nothing-here")
	r.expectError(t, http.StatusNotFound, "not_found")
	if r.Header.Get("X-RateLimit-Remaining") == "" {
		t.Errorf("a 404 for a key carries no rate-limit headers: %v", r.Header)
	}
	r = s.unchecked(http.MethodPost, key, "/api/data/towns")
	r.expectError(t, http.StatusMethodNotAllowed, "bad_request")
	if r.Header.Get("Allow") != http.MethodGet {
		t.Errorf("405 Allow %q", r.Header.Get("Allow"))
	}
	var env struct{ Meta meta }
	s.get(key, "/api/data/towns").decode(t, &env)
	if env.Meta.CreditsUsed != 10 || env.Meta.CreditsRemaining != 990 {
		t.Errorf("after a 404 and a 405 the first paid request: %+v, want 10 used of 1000", env.Meta)
	}
}

func TestTheAccessLogHoldsNoKeyHeaderOrQueryString(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	s.get(key, "/api/data/places?q=secretword&town=lexington")
	s.get(key, "/api/data/places/lex-bourbon-bar")

	log := s.log.String()
	if strings.Count(log, "\n") < 2 || !strings.Contains(log, `"route":"/api/data/places/{placeId}"`) ||
		!strings.Contains(log, `"resource_id":"lex-bourbon-bar"`) {
		t.Fatalf("log %s", log)
	}
	for _, leak := range []string{key, "Bearer", "secretword", "town=", "?"} {
		if strings.Contains(log, leak) {
			t.Fatalf("log contains %q: %s", leak, log)
		}
	}
}
