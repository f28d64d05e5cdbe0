package bleveindex

import (
	"fmt"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/keyword"
	"github.com/blevesearch/bleve/v2/analysis/char/asciifolding"
	"github.com/blevesearch/bleve/v2/analysis/token/edgengram"
	"github.com/blevesearch/bleve/v2/analysis/token/lowercase"
	// Indexes built before the letters tokenizer name bleve's regexp tokenizer in their
	// stored mapping: it must stay registered for them to open.
	_ "github.com/blevesearch/bleve/v2/analysis/tokenizer/regexp"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search/query"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// Field names in the bleve documents.
const (
	fieldPlaceID     = "place_id"
	fieldTownSlug    = "town_slug"
	fieldCategory    = "category"
	fieldRatingCount = "rating_count"
	fieldLat         = "lat"
	fieldLng         = "lng"
	fieldVersion     = "version" // the place stream's version, stored only (placeindex.Doc.Version)
	// Edge n-grams of the words of name, category and description make
	// "bourb" an exact term lookup instead of a prefix scan over the dictionary.
	fieldNameGrams        = "name_ng"
	fieldCategoryGrams    = "category_ng"
	fieldDescriptionGrams = "description_ng"
	// Whole words of all three, for an exact-word bonus and for query words
	// longer than maxGram, which no n-gram covers.
	fieldWords = "words"
)

const (
	analyzerWords = "place_words"
	analyzerGrams = "place_grams"
	maxGram       = 20
)

// Relevance weights: a word in the name says more about a place than one in
// its category, and that more than one in its description. They order places
// whose names hold as many words of q; how many comes first (nameFirstQuery).
const (
	boostName        = 3.0
	boostCategory    = 1.5
	boostDescription = 1.0
	boostWholeWord   = 1.0
)

const checkpointKey = "placeindex.checkpoint"

func newMapping() (mapping.IndexMapping, error) {
	m := bleve.NewIndexMapping()
	// Only letters and digits make words, so "food.restaurant.bbq" and
	// "Bar-B-Q" split into words exactly as placeindex.Words splits a query.
	// (Indexes built before kept bleve's regexp tokenizer with [\p{L}\p{N}]+ in
	// their stored mapping; both make the same words.)
	if err := m.AddCustomTokenizer("place_letters", map[string]any{
		"type": lettersTokenizerName,
	}); err != nil {
		return nil, err
	}
	if err := m.AddCustomTokenFilter("place_edge", map[string]any{
		"type": edgengram.Name,
		"back": false,
		"min":  1.0,
		"max":  float64(maxGram),
	}); err != nil {
		return nil, err
	}
	if err := m.AddCustomAnalyzer(analyzerWords, map[string]any{
		"type":          custom.Name,
		"char_filters":  []any{asciifolding.Name},
		"tokenizer":     "place_letters",
		"token_filters": []any{lowercase.Name},
	}); err != nil {
		return nil, err
	}
	if err := m.AddCustomAnalyzer(analyzerGrams, map[string]any{
		"type":          custom.Name,
		"char_filters":  []any{asciifolding.Name},
		"tokenizer":     "place_letters",
		"token_filters": []any{lowercase.Name, "place_edge"},
	}); err != nil {
		return nil, err
	}

	keywordField := func(store bool) *mapping.FieldMapping {
		f := bleve.NewKeywordFieldMapping()
		f.Analyzer = keyword.Name
		f.Store = store
		f.IncludeInAll = false
		f.IncludeTermVectors = false
		return f
	}
	textField := func(analyzer string) *mapping.FieldMapping {
		f := bleve.NewTextFieldMapping()
		f.Analyzer = analyzer
		f.Store = false
		f.IncludeInAll = false
		f.IncludeTermVectors = false
		f.DocValues = false
		return f
	}
	// Numbers are read back from the stored fields only (the list without q ranks places by
	// rating in memory, ranking.go): indexing one would add 16 terms a place (one per 4-bit
	// shift) for no query: they took about a quarter of the embedded index's rebuild time
	// (BenchmarkRebuild150k, 8.9 s with them, 6.3 s without).
	storedNumber := func() *mapping.FieldMapping {
		f := bleve.NewNumericFieldMapping()
		f.Store = true
		f.Index = false
		f.DocValues = false
		f.IncludeInAll = false
		return f
	}

	doc := bleve.NewDocumentStaticMapping()
	doc.AddFieldMappingsAt(fieldPlaceID, keywordField(false))
	doc.AddFieldMappingsAt(fieldTownSlug, keywordField(true))
	category := keywordField(true)
	category.Index = false
	category.DocValues = false
	doc.AddFieldMappingsAt(fieldCategory, category)
	doc.AddFieldMappingsAt(fieldRatingCount, storedNumber())
	doc.AddFieldMappingsAt(fieldLat, storedNumber())
	doc.AddFieldMappingsAt(fieldLng, storedNumber())
	doc.AddFieldMappingsAt(fieldVersion, storedNumber())
	doc.AddFieldMappingsAt(fieldNameGrams, textField(analyzerGrams))
	doc.AddFieldMappingsAt(fieldCategoryGrams, textField(analyzerGrams))
	doc.AddFieldMappingsAt(fieldDescriptionGrams, textField(analyzerGrams))
	doc.AddFieldMappingsAt(fieldWords, textField(analyzerWords))
	// Every field is left out of bleve's catch-all "_all" field (IncludeInAll), so it would
	// stay empty: without it, no document carries it at all.
	doc.AddSubDocumentMapping("_all", bleve.NewDocumentDisabledMapping())
	m.DefaultMapping = doc
	m.DefaultAnalyzer = analyzerWords
	m.StoreDynamic = false
	m.IndexDynamic = false
	m.DocValuesDynamic = false
	return m, nil
}

// document is the bleve document for d. Fields left empty are left out, so
// a place without a town or location simply has no such field.
func document(d placeindex.Doc) map[string]any {
	doc := map[string]any{
		fieldPlaceID:          d.PlaceID,
		fieldCategory:         d.Category,
		fieldRatingCount:      float64(d.RatingCount),
		fieldNameGrams:        d.Name,
		fieldCategoryGrams:    d.Category,
		fieldDescriptionGrams: d.Description,
		fieldWords:            d.Name + " " + d.Category + " " + d.Description,
	}
	if d.TownSlug != "" {
		doc[fieldTownSlug] = d.TownSlug
	}
	if d.Location != nil {
		doc[fieldLat] = d.Location.Lat
		doc[fieldLng] = d.Location.Lng
	}
	if d.Version > 0 {
		doc[fieldVersion] = float64(d.Version)
	}
	return doc
}

// textQuery turns the words of q into clauses, all of which must match; a word matches when
// it prefixes a word of the name, category or description. It returns nil when q holds no
// words at all.
//
// The words are placeindex.DistinctWords(q), which the read API counts against its limit and
// the Elasticsearch adapter searches (docs/api.md, "Places"): each is analysed on its own, as
// the index's words are (folded, then split, lower-cased). Analysing q whole folded before it
// split, which made other words: "x⒜" searched "x" and "a" ("⒜" folds to "(a)"), and
// "Ⓑourbon" searched "bourbon" where the words of q hold "ourbon".
func textQuery(m mapping.IndexMapping, q string) (query.Query, error) {
	analyzer := m.AnalyzerNamed(analyzerWords)
	if analyzer == nil {
		return nil, fmt.Errorf("analyzer %s missing from index mapping", analyzerWords)
	}
	words := placeindex.DistinctWords(q)
	if len(words) == 0 {
		return nil, nil
	}
	nf := nameFirstQuery{}
	var clauses []query.Query
	tokenAt := map[string]int{} // a token to its index in nf.tokens
	seenName := map[string]bool{}
	for _, w := range words {
		tokens := analyzer.Analyze([]byte(w))
		if len(tokens) == 0 {
			// Folded to no letter or digit, the word can prefix no word of the index: it
			// matches no place (as a match query of no terms does in Elasticsearch).
			return bleve.NewMatchNoneQuery(), nil
		}
		// A word that folds into several ("a⑽b" is "a(10)b") needs each of them; a word that
		// folds as another did ("café", "cafe") asks nothing more, and would cost its clause
		// again.
		var inName []int
		key := ""
		for _, tok := range tokens {
			word := string(tok.Term)
			key += word + " "
			t, ok := tokenAt[word]
			if !ok {
				t = len(nf.tokens)
				tokenAt[word] = t
				clause, spied := wordQuery(word, t)
				clauses = append(clauses, clause)
				nf.tokens = append(nf.tokens, nameToken{name: nameQuery(word), spied: spied})
			}
			inName = append(inName, t)
		}
		if !seenName[key] {
			seenName[key] = true
			nf.words = append(nf.words, inName)
		}
	}
	nf.text = bleve.NewConjunctionQuery(clauses...)
	return nf, nil
}

// nameQuery matches places where word, analysed, prefixes a word of the name. A word longer
// than maxGram is taken for a prefix of a name word when its first maxGram characters are
// (whole words are indexed for name, category and description together).
func nameQuery(word string) query.Query {
	if runes := []rune(word); len(runes) > maxGram {
		word = string(runes[:maxGram])
	}
	t := bleve.NewTermQuery(word)
	t.SetField(fieldNameGrams)
	return t
}

// wordQuery matches places where word, analysed, prefixes a word of the name, category or
// description. When it searches the name's n-grams for word as nameQuery(word) does, that
// term is a nameSpyQuery of slot, and spied is true.
func wordQuery(word string, slot int) (q query.Query, spied bool) {
	if utf8.RuneCountInString(word) > maxGram {
		p := bleve.NewPrefixQuery(word)
		p.SetField(fieldWords)
		return p, false
	}
	term := func(field string, boost float64) *query.TermQuery {
		t := bleve.NewTermQuery(word)
		t.SetField(field)
		t.SetBoost(boost)
		return t
	}
	return bleve.NewDisjunctionQuery(
		nameSpyQuery{term: term(fieldNameGrams, boostName), slot: slot},
		term(fieldCategoryGrams, boostCategory),
		term(fieldDescriptionGrams, boostDescription),
		term(fieldWords, boostWholeWord),
	), true
}
