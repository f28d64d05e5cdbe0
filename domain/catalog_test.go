package domain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/demodata"
	"github.com/kyapi/kyapi/domain"
)

var catalogToday = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

const (
	catalogTownLine  = `{"record":"town","slug":"berea","name":"Berea","county":"Madison","population":15539}`
	catalogPlaceLine = `{"record":"place","place_id":"plc_1","name":"Joe's Diner","category":"food.restaurant.diner","town_slug":"berea","latitude":37.57,"longitude":-84.29}`
	catalogEventLine = `{"record":"event","event_id":"evt_1","title":"Berea Craft Festival","event_type":"festival","start_date":"2026-12-01T15:00:00Z","town_slug":"berea"}`
)

func TestTheDemoCatalogParsesCompletely(t *testing.T) {
	var buf bytes.Buffer
	stats, err := demodata.Write(&buf, demodata.Config{Places: 300, Today: catalogToday})
	if err != nil {
		t.Fatal(err)
	}
	c, err := domain.ParseCatalog(&buf)
	if err != nil {
		t.Fatalf("ParseCatalog: %v", err)
	}
	if len(c.Towns) != stats.Towns || len(c.Places) != stats.Places || len(c.Events) != stats.Events {
		t.Fatalf("parsed %d towns, %d places, %d events; want %+v", len(c.Towns), len(c.Places), len(c.Events), stats)
	}
	menus, reviews, located := 0, 0, 0
	for _, p := range c.Places {
		if len(p.Menu) > 0 {
			menus++
		}
		if p.ReviewSummary != nil {
			reviews++
			if p.ReviewSummary.PlaceID != p.PlaceID {
				t.Errorf("review summary of %s names place %q", p.PlaceID, p.ReviewSummary.PlaceID)
			}
		}
		if p.Latitude != nil {
			located++
		}
	}
	if menus != stats.Menus || reviews != stats.Reviews || located != stats.Places {
		t.Errorf("menus %d reviews %d located %d; want %d, %d, %d", menus, reviews, located, stats.Menus, stats.Reviews, stats.Places)
	}
}

func TestFlatAndNestedLinesMeanTheSame(t *testing.T) {
	flat := strings.Join([]string{catalogTownLine, catalogPlaceLine, catalogEventLine}, "\n")
	nested := strings.Join([]string{
		`{"record":"town","town":{"slug":"berea","name":"Berea","county":"Madison","population":15539}}`,
		`{"record":"place","place":{"place_id":"plc_1","name":"Joe's Diner","category":"food.restaurant.diner","town_slug":"berea","latitude":37.57,"longitude":-84.29}}`,
		`{"record":"event","event":{"event_id":"evt_1","title":"Berea Craft Festival","event_type":"festival","start_date":"2026-12-01T15:00:00Z","town_slug":"berea"}}`,
	}, "\r\n")
	a, err := domain.ParseCatalog(strings.NewReader(flat))
	if err != nil {
		t.Fatal(err)
	}
	b, err := domain.ParseCatalog(strings.NewReader(nested))
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("flat and nested differ:\n%s\n%s", ja, jb)
	}
	if a.Records() != 3 || a.Places[0].EnrichmentTier != domain.TierBasic || a.Places[0].Sources == nil {
		t.Fatalf("unexpected catalog %s", ja)
	}
}

func TestAnIDRepeatedInOneBatchKeepsItsLastValues(t *testing.T) {
	in := catalogPlaceLine + "\n" + catalogTownLine + "\n" +
		strings.Replace(catalogPlaceLine, `"Joe's Diner"`, `"Joe's Grill"`, 1)
	c, err := domain.ParseCatalog(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Places) != 1 || c.Places[0].Name != "Joe's Grill" {
		t.Fatalf("places %+v, want one named Joe's Grill", c.Places)
	}
}

func TestUnknownFieldsAreIgnored(t *testing.T) {
	in := strings.Replace(catalogPlaceLine, `{"record":"place",`, `{"record":"place","parking":{"spaces":12},"tags":["x"],`, 1)
	if _, err := domain.ParseCatalog(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
}

func TestBadLinesAreReportedByLineAndField(t *testing.T) {
	// place sets one field of a valid place line, given as `"field":json`.
	place := func(field string) string {
		var m map[string]json.RawMessage
		_ = json.Unmarshal([]byte(catalogPlaceLine), &m)
		var one map[string]json.RawMessage
		if err := json.Unmarshal([]byte("{"+field+"}"), &one); err != nil {
			t.Fatal(err)
		}
		for k, v := range one {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	withoutPlaceField := func(field string) string {
		var m map[string]any
		_ = json.Unmarshal([]byte(catalogPlaceLine), &m)
		delete(m, field)
		b, _ := json.Marshal(m)
		return string(b)
	}
	cases := []struct {
		name, line, field, msg string
	}{
		{"not json", `{"record":"town",`, "", "invalid JSON"},
		{"gzip-compressed", "\x1f\x8b\x08\x00\x00\x00\x00\x00", "", "gzip-compressed"},
		{"not an object", `["town"]`, "", "not a JSON object"},
		{"no record kind", `{"slug":"berea","name":"Berea"}`, "record", "is required"},
		{"unknown record kind", `{"record":"county","slug":"x"}`, "record", "unknown record kind"},
		{"record kind not a string", `{"record":1}`, "record", "must be a string"},
		{"town without slug", `{"record":"town","name":"Berea"}`, "slug", "is required"},
		{"town slug with capitals", `{"record":"town","slug":"Berea","name":"Berea"}`, "slug", "a-z"},
		{"town without name", `{"record":"town","slug":"berea"}`, "name", "is required"},
		{"population not an integer", `{"record":"town","slug":"berea","name":"Berea","population":1.5}`, "population", "integer"},
		{"population as a string", `{"record":"town","slug":"berea","name":"Berea","population":"15539"}`, "population", "integer"},
		{"event without start", `{"record":"event","event_id":"e1","title":"T"}`, "start_date", "is required"},
		{"event start not RFC 3339", `{"record":"event","event_id":"e1","title":"T","start_date":"2026-12-01"}`, "start_date", "RFC 3339"},
		{"event start 24 hours ahead of UTC", `{"record":"event","event_id":"e1","title":"T","start_date":"2026-12-01T10:00:00+24:00"}`, "start_date", "offset"},
		{"event end with a 60-minute offset", `{"record":"event","event_id":"e1","title":"T","start_date":"2026-12-01T10:00:00Z","end_date":"2026-12-02T10:00:00-23:60"}`, "end_date", "offset"},
		{"observation 24 hours behind UTC", place(`"sources":{"phone":[{"source":"a","value":"1","observed_at":"2026-01-01T00:00:00-24:00"}]}`), "sources.phone[0].observed_at", "offset"},
		{"review summary of a 24-hour offset", place(`"review_summary":{"headline":"h","summary":"s","generated_at":"2026-01-01T00:00:00+24:00"}`), "review_summary.generated_at", "offset"},
		{"event ending before it starts", `{"record":"event","event_id":"e1","title":"T","start_date":"2026-12-01T10:00:00Z","end_date":"2026-12-01T09:00:00Z"}`, "end_date", "before"},
		{"event id with a slash", `{"record":"event","event_id":"e/1","title":"T","start_date":"2026-12-01T10:00:00Z"}`, "event_id", "characters"},
		{"place without category", withoutPlaceField("category"), "category", "is required"},
		{"place id too long", place(`"place_id":"` + strings.Repeat("a", 129) + `"`), "place_id", "128"},
		// "." and ".." are path segments URL parsers drop: /places/.. would not reach the place.
		{"place id of dots", place(`"place_id":".."`), "place_id", "only dots"},
		{"place id of a dot", place(`"place_id":"."`), "place_id", "only dots"},
		{"latitude out of range", place(`"latitude":123`), "latitude", "must be between -90 and 90"},
		{"longitude out of range", place(`"longitude":-180.5`), "longitude", "must be between -180 and 180"},
		{"latitude without longitude", withoutPlaceField("longitude"), "longitude", "required when latitude"},
		{"latitude as a string", place(`"latitude":"37.5"`), "latitude", "must be a number"},
		{"rating above 5", place(`"rating":5.1`), "rating", "between 0 and 5"},
		{"negative rating count", place(`"rating_count":-1`), "rating_count", "negative"},
		{"gem score above 1", place(`"local_gem_score":1.01`), "local_gem_score", "between 0 and 1"},
		{"is_gem as a string", place(`"is_gem":"yes"`), "is_gem", "true or false"},
		{"unknown enrichment tier", place(`"enrichment_tier":"gold"`), "enrichment_tier", "basic, enhanced or premium"},
		{"relative website", place(`"website":"joes.example"`), "website", "http"},
		{"ftp website", place(`"website":"ftp://joes.example"`), "website", "http"},
		{"unknown day", place(`"hours":{"monday":[]}`), "hours.monday", "unknown day"},
		{"bad opening time", place(`"hours":{"mon":[{"open":"9:00","close":"17:00"}]}`), "hours.mon[0].open", "HH:MM"},
		{"closing at 25:00", place(`"hours":{"tue":[{"open":"09:00","close":"25:00"}]}`), "hours.tue[0].close", "HH:MM"},
		{"opening at 24:00", place(`"hours":{"sat":[{"open":"24:00","close":"03:00"}]}`), "hours.sat[0].open", "24:00 only closes"},
		{"day not an array", place(`"hours":{"mon":{"open":"09:00"}}`), "hours.mon", "array"},
		{"menu item without name", place(`"menu":[{"name":"Pie","price":3},{"price":2}]`), "menu[1].name", "is required"},
		{"negative menu price", place(`"menu":[{"name":"Pie","price":-3}]`), "menu[0].price", "negative"},
		{"menu not an array", place(`"menu":{"name":"Pie"}`), "menu", "array"},
		{"review confidence above 1", place(`"review_summary":{"headline":"h","summary":"s","confidence":1.2}`), "review_summary.confidence", "between 0 and 1"},
		{"review summary not an object", place(`"review_summary":"great"`), "review_summary", "object"},
		{"observation without date", place(`"sources":{"phone":[{"source":"a","value":"1"}]}`), "sources.phone[0].observed_at", "is required"},
		{"observation with a bad date", place(`"sources":{"phone":[{"source":"a","value":"1","observed_at":"yesterday"}]}`), "sources.phone[0].observed_at", "RFC 3339"},
		{"sources not an object", place(`"sources":[]`), "sources", "object"},
		{"nested record not an object", `{"record":"town","town":"berea"}`, "town", "object"},
		// Accepted, these stopped the catalog projection: a time past 9999 in UTC cannot be
		// served as JSON, and a normalized name over 2,704 bytes cannot be indexed.
		{"observation in the year 10000 in UTC", place(`"sources":{"phone":[{"source":"a","value":"1","observed_at":"9999-12-31T23:00:00-05:00"}]}`), "sources.phone[0].observed_at", "0000 to 9999"},
		{"review generated in the year 10000 in UTC", place(`"review_summary":{"summary":"s","generated_at":"9999-12-31T23:00:00-05:00"}`), "review_summary.generated_at", "0000 to 9999"},
		{"event starting in the year 10000 in UTC", `{"record":"event","event_id":"e1","title":"T","start_date":"9999-12-31T20:00:00-04:00"}`, "start_date", "0000 to 9999"},
		{"rating count over 2^31-1", place(`"rating_count":2147483648`), "rating_count", "at most 2147483647"},
		{"population over 2^31-1", `{"record":"town","slug":"berea","name":"Berea","population":2147483648}`, "population", "at most 2147483647"},
		{"review count over 2^31-1", place(`"review_summary":{"summary":"s","review_count":2147483648}`), "review_summary.review_count", "at most 2147483647"},
		{"place name over 300 characters", place(`"name":"` + strings.Repeat("é", 301) + `"`), "name", "at most 300"},
		{"town name over 300 characters", `{"record":"town","slug":"berea","name":"` + strings.Repeat("b", 301) + `"}`, "name", "at most 300"},
		{"event title over 300 characters", `{"record":"event","event_id":"e1","title":"` + strings.Repeat("t", 301) + `","start_date":"2026-12-01T10:00:00Z"}`, "title", "at most 300"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := catalogTownLine + "\n\n" + catalogEventLine + "\n" + tc.line + "\n" + catalogPlaceLine
			_, err := domain.ParseCatalog(strings.NewReader(in))
			var ie *domain.ImportError
			if !errors.As(err, &ie) {
				t.Fatalf("got %v, want an *ImportError", err)
			}
			if ie.Line != 4 || ie.Field != tc.field || !strings.Contains(ie.Message, tc.msg) {
				t.Fatalf("got line %d field %q message %q; want line 4 field %q message containing %q", ie.Line, ie.Field, ie.Message, tc.field, tc.msg)
			}
		})
	}
}

func TestImportErrorNamesLineAndField(t *testing.T) {
	e := &domain.ImportError{Line: 3, Field: "latitude", Message: "must be between -90 and 90"}
	if got := e.Error(); got != `line 3: field "latitude": must be between -90 and 90` {
		t.Fatalf("Error() = %s", got)
	}
	e = &domain.ImportError{Line: 7, Message: "line is longer than 1 MiB"}
	if got := e.Error(); got != `line 7: line is longer than 1 MiB` {
		t.Fatalf("Error() = %s", got)
	}
}

func TestTheFirstBadLineIsTheOneReported(t *testing.T) {
	in := catalogTownLine + "\n" + `{"record":"town","slug":"x"}` + "\n" + `{"record":"nope"}`
	_, err := domain.ParseCatalog(strings.NewReader(in))
	var ie *domain.ImportError
	if !errors.As(err, &ie) || ie.Line != 2 || ie.Field != "name" {
		t.Fatalf("got %v, want line 2 field name", err)
	}
}

func TestLinesOverOneMebibyteAreRefused(t *testing.T) {
	desc := strings.Repeat("x", domain.MaxImportLine)
	long := strings.Replace(catalogPlaceLine, `{"record":"place",`, `{"record":"place","description":"`+desc+`",`, 1)
	_, err := domain.ParseCatalog(strings.NewReader(catalogTownLine + "\n" + long + "\n"))
	var ie *domain.ImportError
	if !errors.As(err, &ie) || ie.Line != 2 || !strings.Contains(ie.Message, "1 MiB") {
		t.Fatalf("got %v, want line 2 too long", err)
	}
	// Just under the limit is fine.
	pad := domain.MaxImportLine - len(catalogPlaceLine) - len(`"description":"",`)
	ok := strings.Replace(catalogPlaceLine, `{"record":"place",`, `{"record":"place","description":"`+strings.Repeat("x", pad)+`",`, 1)
	if len(ok) != domain.MaxImportLine {
		t.Fatalf("test line is %d bytes", len(ok))
	}
	if _, err := domain.ParseCatalog(strings.NewReader(ok + "\n")); err != nil {
		t.Fatalf("a line of exactly 1 MiB: %v", err)
	}
}

func TestABatchHoldsAtMost200000Records(t *testing.T) {
	var b strings.Builder
	for i := 0; i <= domain.MaxImportRecords; i++ {
		b.WriteString(`{"record":"town","slug":"t","name":"T"}` + "\n")
	}
	_, err := domain.ParseCatalog(strings.NewReader(b.String()))
	var ie *domain.ImportError
	if !errors.As(err, &ie) || ie.Line != domain.MaxImportRecords+1 {
		t.Fatalf("got %v, want an error on line %d", err, domain.MaxImportRecords+1)
	}
}

func TestNormalizedName(t *testing.T) {
	cases := map[string]string{
		"Joe's Diner":             "joes diner",
		"  JOES   DINER ":         "joes diner",
		"Joe's Diner #12":         "joes diner",
		"Joe's Diner # 7":         "joes diner",
		"Joe's Diner No. 3":       "joes diner",
		"Joe's Diner no 14":       "joes diner",
		"Town & Country Antiques": "town country antiques",
		"Bar-B-Q Heaven":          "barbq heaven",
		"Casino 5":                "casino 5",
		"Studio 54":               "studio 54",
		"#1":                      "1",
		"Café Olé":                "café olé",
	}
	for in, want := range cases {
		if got := domain.NormalizedName(in); got != want {
			t.Errorf("NormalizedName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCanonicalURL(t *testing.T) {
	for _, base := range []string{"https://api.example", "https://api.example/"} {
		if got := domain.CanonicalURL(base, "plc_0a1b"); got != "https://api.example/places/plc_0a1b" {
			t.Errorf("CanonicalURL(%q) = %s", base, got)
		}
	}
}

// An observation's value is kept as given: a name repeated in one of its objects is refused
// (decoding would keep the last), the same name in different objects is not.
func TestAnObservationValueNamingAFieldTwiceInOneObjectIsRefused(t *testing.T) {
	line := func(value string) string {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(catalogPlaceLine), &m); err != nil {
			t.Fatal(err)
		}
		m["sources"] = json.RawMessage(`{"hours":[{"source":"a","observed_at":"2026-01-01T00:00:00Z","value":` + value + `}]}`)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, ok := range []string{
		`{"mon":[{"open":"09:00","close":"17:00"}],"tue":[{"open":"09:00","close":"17:00"}]}`,
		`[{"a":1},{"a":2},[{"a":{"a":3}}]]`,
		`{"a":"\"a\"","b":{"a":1}}`,
	} {
		if _, err := domain.ParseCatalog(strings.NewReader(line(ok))); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{
		`{"mon":[{"open":"09:00","open":"10:00"}]}`,
		`[{"a":1,"b":[],"a":2}]`,
		`{"x":{"y":1},"x":2}`,
		`{"\u0061":1,"a":2}`,
	} {
		_, err := domain.ParseCatalog(strings.NewReader(line(bad)))
		if err == nil || !strings.Contains(err.Error(), "sources.hours[0].value") || !strings.Contains(err.Error(), "twice") {
			t.Errorf("%s: %v; want the value refused, naming it", bad, err)
		}
	}
}

// A nested record's fields are named as on a flat line, a field given twice included; the
// wrapper, when it is not an object, by its own name.
func TestANestedRecordsFieldsAreNamedAsOnAFlatLine(t *testing.T) {
	for _, c := range []struct{ line, field string }{
		{`{"record":"place","place_id":"p1","name":"N","category":"c","name":"M"}`, "name"},
		{`{"record":"place","place":{"place_id":"p1","name":"N","category":"c","name":"M"}}`, "name"},
		{`{"record":"place","place":{"place_id":"p1","name":"N","category":"c","rating":"x"}}`, "rating"},
		{`{"record":"town","town":"berea"}`, "town"},
		// A field beside the nested object would not be read: refused, not dropped (review).
		{`{"record":"place","place":{"place_id":"p1","name":"N","category":"c"},"rating":4.5,"phone":"502"}`, "phone"},
		{`{"record":"town","town":{"slug":"berea","name":"Berea"},"population":15539}`, "population"},
	} {
		_, err := domain.ParseCatalog(strings.NewReader(c.line))
		var ie *domain.ImportError
		if !errors.As(err, &ie) || ie.Line != 1 || ie.Field != c.field {
			t.Errorf("%s: error %v, want line 1 field %q", c.line, err, c.field)
		}
	}
}

// A place's website is served as a URI (api-spec: "string (URI)"): one written as a URI is kept
// letter for letter; what a URI cannot hold (a space, a quote, a non-ASCII letter, a '%' that
// starts no escape) is percent-encoded and an international host name is written in punycode,
// so that an export that imported before imports still; what is no http or https address, or
// holds a control character, is refused naming website.
func TestAWebsiteIsServedAsAURI(t *testing.T) {
	line := func(website string) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(catalogPlaceLine), &m); err != nil {
			t.Fatal(err)
		}
		m["website"] = website
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for given, want := range map[string]string{
		"https://example.com/our%20menu":                    "https://example.com/our%20menu",
		"http://example.com":                                "http://example.com",
		"HTTPS://Example.COM:8443/a/b;c=d?q=1&r=%C3%A9#top": "HTTPS://Example.COM:8443/a/b;c=d?q=1&r=%C3%A9#top",
		"https://user:pw@example.com/~joe/(menu)!*'$,+=@":   "https://user:pw@example.com/~joe/(menu)!*'$,+=@",
		"http://[2001:db8::1]/":                             "http://[2001:db8::1]/",
		"https://xn--caf-dma.example/":                      "https://xn--caf-dma.example/",
		"https://example.com/our menu":                      "https://example.com/our%20menu",
		`https://example.com/<b>"menu"</b>`:                 "https://example.com/%3Cb%3E%22menu%22%3C/b%3E",
		"https://example.com/a{b}|c^d`e":                    "https://example.com/a%7Bb%7D%7Cc%5Ed%60e",
		`https://example.com/a\b`:                           "https://example.com/a%5Cb",
		"https://café.example/menü":                         "https://xn--caf-dma.example/men%C3%BC",
		"https://example.com/%zz":                           "https://example.com/%25zz",
		"https://example.com/?q=%":                          "https://example.com/?q=%25",
		"https://example.com/a#b#c":                         "https://example.com/a#b%23c",
		"https://example.com/a[1]":                          "https://example.com/a%5B1%5D",
	} {
		c, err := domain.ParseCatalog(strings.NewReader(line(given) + "\n"))
		if err != nil || c.Places[0].Website == nil || *c.Places[0].Website != want {
			got := ""
			if err == nil && c.Places[0].Website != nil {
				got = *c.Places[0].Website
			}
			t.Errorf("website %q: %q, %v; want %q", given, got, err, want)
		}
	}
	for _, bad := range []string{
		"example.com",
		"ftp://example.com/",
		"https://",
		"https:///menu",
		"https://example.com/menu\t",
		"https://exa\nmple.com/",
		"javascript:alert(1)",
	} {
		_, err := domain.ParseCatalog(strings.NewReader(line(bad) + "\n"))
		var ie *domain.ImportError
		if !errors.As(err, &ie) || ie.Line != 1 || ie.Field != "website" {
			t.Errorf("website %q: %v; want line 1 refused, naming website", bad, err)
		}
	}
}

// The events list is sorted by start_date as stored, to the microsecond (PostgreSQL's
// precision): a start_date finer than that is cut to it at import, so that what is served is
// what is sorted, and a catalog written with seven digits (.NET's round-trip format) imports.
func TestAnEventStartFinerThanAMicrosecondIsCutToIt(t *testing.T) {
	event := func(start string) string {
		return `{"record":"event","event_id":"e1","title":"T","start_date":"` + start + `"}` + "\n"
	}
	for start, want := range map[string]string{
		"2026-12-01T10:00:00Z":                "2026-12-01T10:00:00Z",
		"2026-12-01T10:00:00.123456Z":         "2026-12-01T10:00:00.123456Z",
		"2026-12-01T10:00:00.123456000Z":      "2026-12-01T10:00:00.123456Z",
		"2026-12-01T10:00:00.000000900Z":      "2026-12-01T10:00:00Z",
		"2026-12-01T10:00:00.1234567Z":        "2026-12-01T10:00:00.123456Z", // .NET's round-trip format
		"2026-12-01T05:00:00.000000001-05:00": "2026-12-01T10:00:00Z",
	} {
		c, err := domain.ParseCatalog(strings.NewReader(event(start)))
		if err != nil {
			t.Errorf("start_date %s: %v", start, err)
			continue
		}
		if got := c.Events[0].StartDate.UTC().Format(time.RFC3339Nano); got != want {
			t.Errorf("start_date %s: %s, want %s", start, got, want)
		}
	}
	// The end is compared with the start as given: 400 ns before it is still before it.
	_, err := domain.ParseCatalog(strings.NewReader(`{"record":"event","event_id":"e1","title":"T","start_date":"2026-12-01T10:00:00.0000009Z","end_date":"2026-12-01T10:00:00.0000005Z"}` + "\n"))
	var ie *domain.ImportError
	if !errors.As(err, &ie) || ie.Field != "end_date" {
		t.Errorf("an end 400 ns before the start: %v; want it refused naming end_date", err)
	}
}
