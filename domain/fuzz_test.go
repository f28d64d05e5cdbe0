package domain_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/domain"
)

// A well-formed key (secret of 36 '7's and its checksum), as NewKey gives for a reader of
// repeated byte 7.
const fuzzKey = "svc_live_7777777777777777777777777777777777773UHayz"

// FuzzParseAuthorization: any header value either yields a well-formed key that the header
// contains, or ErrMissingKey / ErrInvalidKey; it never panics.
func FuzzParseAuthorization(f *testing.F) {
	for _, seed := range []string{
		"",
		"Bearer " + fuzzKey,
		"bearer " + fuzzKey,
		"  BEARER   " + fuzzKey + "  ",
		"Bearer",
		"Bearer ",
		"Basic dXNlcjpwYXNz",
		"Bearer svc_live_short",
		"Bearer " + fuzzKey[:len(fuzzKey)-1] + "x",
		"Bearer " + fuzzKey + " extra",
		"Bearer\t" + fuzzKey,
		"Bearer " + strings.Repeat("A", 16<<10),
		"Bearer svc_live_\xff\xfe" + fuzzKey[11:],
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		key, err := domain.ParseAuthorization(header)
		if err != nil {
			if !errors.Is(err, domain.ErrMissingKey) && !errors.Is(err, domain.ErrInvalidKey) {
				t.Fatalf("ParseAuthorization(%q): unexpected error %v", header, err)
			}
			if key != "" {
				t.Fatalf("ParseAuthorization(%q): key %q with error %v", header, key, err)
			}
			return
		}
		if !domain.WellFormedKey(key) {
			t.Fatalf("ParseAuthorization(%q) accepted malformed key %q", header, key)
		}
		if !strings.Contains(header, key) {
			t.Fatalf("ParseAuthorization(%q) returned %q, which the header does not contain", header, key)
		}
		if !strings.HasPrefix(key, domain.KeyPrefix) {
			t.Fatalf("key %q lacks the prefix %q", key, domain.KeyPrefix)
		}
	})
}

// FuzzParseCatalog: any NDJSON input either parses into records that all carry their
// required fields, or fails with an *ImportError naming a line and a field or message.
func FuzzParseCatalog(f *testing.F) {
	for _, seed := range []string{
		catalogTownLine + "\n" + catalogPlaceLine + "\n" + catalogEventLine + "\n",
		"",
		"\n\n   \n",
		"not json\n",
		`{"record":"ship"}`,
		`{"record":"town","town":{"slug":"berea","name":"Berea"}}`,
		`{"record":"place","place_id":"p1","name":"n","category":"c","menu":[{"name":"x","price":-1}]}`,
		`{"record":"place","place_id":"p1","name":"n","category":"c","hours":{"mon":[{"open":"25:00","close":"01:00"}]}}`,
		`{"record":"place","place_id":"p1","name":"n","category":"c","sources":{"phone":[{"source":"g","value":1,"observed_at":"2026-01-01T00:00:00Z"}]}}`,
		`{"record":"event","event_id":"e1","title":"t","start_date":"2026-02-30T00:00:00Z"}`,
		`{"record":"town","slug":"a","name":"b","population":1e300}`,
		`{"record":"place","place_id":"../etc","name":"n","category":"c"}`,
		"{\"record\":\"town\",\"slug\":\"a\",\"name\":\"\xff\xfe\"}",
		`{"record":"town","slug":"a","name":"\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, ndjson []byte) {
		cat, err := domain.ParseCatalog(bytes.NewReader(ndjson))
		if err != nil {
			var ie *domain.ImportError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v (%T) is not an *ImportError", err, err)
			}
			if ie.Line < 1 {
				t.Fatalf("ImportError line %d < 1: %v", ie.Line, ie)
			}
			if ie.Field == "" && ie.Message == "" {
				t.Fatalf("ImportError with neither field nor message: %#v", ie)
			}
			if ie.Line > bytes.Count(ndjson, []byte("\n"))+1 {
				t.Fatalf("ImportError line %d past the input's %d lines", ie.Line, bytes.Count(ndjson, []byte("\n"))+1)
			}
			return
		}
		if cat.Records() > domain.MaxImportRecords {
			t.Fatalf("%d records, more than %d", cat.Records(), domain.MaxImportRecords)
		}
		blank := func(s string) bool { return strings.TrimSpace(s) == "" }
		for _, tw := range cat.Towns {
			if blank(tw.Slug) || blank(tw.Name) {
				t.Fatalf("town without slug or name: %+v", tw)
			}
			if tw.Population != nil && *tw.Population < 0 {
				t.Fatalf("town with negative population: %+v", tw)
			}
		}
		for _, p := range cat.Places {
			if blank(p.PlaceID) || blank(p.Name) || blank(p.Category) {
				t.Fatalf("place without id, name or category: %+v", p)
			}
			if (p.Latitude == nil) != (p.Longitude == nil) {
				t.Fatalf("place with only one coordinate: %+v", p)
			}
			if p.Latitude != nil && (*p.Latitude < -90 || *p.Latitude > 90 || *p.Longitude < -180 || *p.Longitude > 180) {
				t.Fatalf("place with coordinates out of range: %+v", p)
			}
			switch p.EnrichmentTier {
			case domain.TierBasic, domain.TierEnhanced, domain.TierPremium:
			default:
				t.Fatalf("place with tier %q", p.EnrichmentTier)
			}
			for _, m := range p.Menu {
				if blank(m.Name) || len(m.Currency) != 3 {
					t.Fatalf("menu item without name or currency: %+v", m)
				}
			}
			if p.ReviewSummary != nil && blank(p.ReviewSummary.Summary) {
				t.Fatalf("review summary without summary: %+v", p.ReviewSummary)
			}
		}
		for _, e := range cat.Events {
			if blank(e.EventID) || blank(e.Title) || e.StartDate.IsZero() {
				t.Fatalf("event without id, title or start date: %+v", e)
			}
			if e.EndDate != nil && e.EndDate.Before(e.StartDate) {
				t.Fatalf("event ending before it starts: %+v", e)
			}
		}
	})
}
