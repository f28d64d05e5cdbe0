package elasticindex

// Every place the catalog accepts (and the embedded index indexes) must be indexable: one
// document Elasticsearch rejects fails its whole bulk (bulkError), Upsert returns the error,
// the checkpoint does not move, and the projection retries the same batch for ever, so no
// place after it is indexed.
//
// No Elasticsearch server can run on this machine, so these tests read the mapping the
// adapter sends (indexBody) against the Elasticsearch 8 / Lucene limits it must respect:
//   - an "integer" field rejects values above 2^31-1 (mapper_parsing_exception, "out of range
//     of int"); a "long" holds every integer up to 2^63-1;
//   - Lucene refuses any single term longer than 32,766 bytes ("Document contains at least one
//     immense term"); a keyword's ignore_above counts characters, which UTF-8 encodes in up to
//     4 bytes (so at most 8191), and the truncate token filter cuts a token to a number of
//     UTF-16 code units, which UTF-8 encodes in up to 3 bytes each.
//
// The contract suite (TestContract) runs against a real Elasticsearch 8 when
// ELASTICSEARCH_URL is set.

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/blevesearch/bleve/v2/analysis/char/asciifolding"

	"github.com/kyapi/kyapi/domain"
)

const maxTermBytes = 32766

type mappingBody struct {
	Settings struct {
		Analysis struct {
			Filter   map[string]map[string]any `json:"filter"`
			Analyzer map[string]struct {
				Filter []string `json:"filter"`
			} `json:"analyzer"`
		} `json:"analysis"`
	} `json:"settings"`
	Mappings struct {
		Properties map[string]map[string]any `json:"properties"`
	} `json:"mappings"`
}

func mapping(t *testing.T) mappingBody {
	t.Helper()
	var body mappingBody
	if err := json.Unmarshal([]byte(indexBody), &body); err != nil {
		t.Fatalf("indexBody: %v", err)
	}
	return body
}

// The catalog takes a rating_count up to 2^31-1 (domain/catalog.go count()) and refuses one
// above it; the mapping must hold the largest it takes.
func TestRatingCountIsMappedToHoldEveryCatalogValue(t *testing.T) {
	place := func(n string) string {
		return `{"record":"place","place_id":"p-big","name":"Big","category":"food","rating_count":` + n + `}`
	}
	c, err := domain.ParseCatalog(strings.NewReader(place("2147483647")))
	if err != nil {
		t.Fatalf("the catalog refuses the largest rating_count it documents: %v", err)
	}
	if n := *c.Places[0].RatingCount; n != 2147483647 {
		t.Fatalf("rating_count parsed as %d", n)
	}
	if _, err := domain.ParseCatalog(strings.NewReader(place("2147483648"))); err == nil {
		t.Fatal("the catalog takes a rating_count above 2^31-1: the mapping must then hold it")
	}
	if typ := mapping(t).Mappings.Properties["rating_count"]["type"]; typ != "long" && typ != "integer" {
		t.Errorf(`rating_count is mapped %q, which cannot hold the catalog's rating_count 2147483647: want "long" or "integer"`, typ)
	}
}

// The catalog bounds an import line at 1 MiB, not a category: a keyword without ignore_above
// fails the bulk of a 40,000-byte category with an immense-term error.
func TestKeywordsIgnoreValuesTooLongForOneTerm(t *testing.T) {
	category := strings.Repeat("a", 40000)
	line := `{"record":"place","place_id":"p-long","name":"Long","category":"` + category + `"}`
	if _, err := domain.ParseCatalog(strings.NewReader(line)); err != nil {
		t.Fatalf("the catalog refuses a 40,000-byte category (then this rule is moot): %v", err)
	}
	for field, m := range mapping(t).Mappings.Properties {
		if m["type"] != "keyword" {
			continue
		}
		limit, ok := m["ignore_above"].(float64)
		if !ok || limit <= 0 || limit*4 > maxTermBytes {
			t.Errorf("keyword %s has ignore_above %v; want at most %d characters (%d bytes / 4)", field, m["ignore_above"], maxTermBytes/4, maxTermBytes)
		}
	}
}

// A name or description can hold one 40,000-letter word: every analyzer must cut tokens short
// of Lucene's term limit, after folding (which can lengthen a token).
func TestAnalyzersTruncateWordsTooLongForOneTerm(t *testing.T) {
	body := mapping(t)
	if len(body.Settings.Analysis.Analyzer) == 0 {
		t.Fatal("indexBody defines no analyzers")
	}
	for name, a := range body.Settings.Analysis.Analyzer {
		i := slices.IndexFunc(a.Filter, func(f string) bool { return body.Settings.Analysis.Filter[f]["type"] == "truncate" })
		if i < 0 {
			t.Errorf("analyzer %s (%v) has no truncate filter", name, a.Filter)
			continue
		}
		if length, _ := body.Settings.Analysis.Filter[a.Filter[i]]["length"].(float64); length <= 0 || length*3 > maxTermBytes {
			t.Errorf("analyzer %s truncates to %v; want at most %d UTF-16 units (%d bytes / 3)", name, length, maxTermBytes/3, maxTermBytes)
		}
		if fold := slices.Index(a.Filter, "asciifolding"); fold > i {
			t.Errorf("analyzer %s truncates before folding (%v): folding can lengthen the token again", name, a.Filter)
		}
	}
}

// A q word finds the same places whatever its case, as in the embedded index: typed in
// capitals it finds what it finds in small letters. ASCII folding maps some lowercase letters to uppercase ASCII (small capitals such as
// ᴀ to "A", ǧ to "G": bleve's folding, a port of Lucene's table, shows it), so lowercasing only
// before folding leaves those words uppercase in the index while the query's ᴀ, lowercased
// first, folds to the same "A" but "a" never matches it. Every analyzer lowercases again after
// folding, as the embedded index (fold, then lowercase) does.
func TestAnalyzersLowercaseAfterFolding(t *testing.T) {
	if folded := string(asciifolding.New().Filter([]byte("ᴀǧ"))); folded != "AG" {
		t.Logf("ASCII folding of ᴀǧ = %q (this rule holds whatever it gives)", folded)
	}
	for name, a := range mapping(t).Settings.Analysis.Analyzer {
		fold := slices.Index(a.Filter, "asciifolding")
		if fold < 0 {
			t.Errorf("analyzer %s (%v) does not fold to ASCII", name, a.Filter)
			continue
		}
		if !slices.Contains(a.Filter[fold+1:], "lowercase") {
			t.Errorf("analyzer %s (%v) does not lowercase after folding: ASCII folding can give uppercase letters", name, a.Filter)
		}
	}
}
