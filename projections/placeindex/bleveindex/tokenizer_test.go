package bleveindex

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	goregexp "regexp"
	"testing"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/mapping"

	"github.com/kyapi/kyapi/demodata"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// The letters tokenizer makes the words bleve's regexp tokenizer made with [\p{L}\p{N}]+ (the
// tokenizer of the indexes built before it): same terms, offsets and positions, over every
// text of a demo catalog and the edges of Unicode. The reference is the regexp's matches,
// numbered as that tokenizer numbers them; this test binary does not import the tokenizer's
// package, so that only the package's own import keeps it registered for old indexes.
func TestTheLettersTokenizerMakesTheRegexpTokenizersWords(t *testing.T) {
	texts := []string{
		"", "   ", "a", "Bar-B-Q", "food.restaurant.bbq", "Café Ñandú 42nd St.", "東京ラーメン 本店",
		"e\u0301cole", "½ price ① ⅷ", "\xff\xfeabc\xc3", "tab\there\nnew line", "İstanbul ǅemal", "x\u200by",
		"digits 0123 ٣٤٥ and ９", "emoji 🍕pizza🍺", "ﬁsh ﬂour",
	}
	var buf bytes.Buffer
	if _, err := demodata.Write(&buf, demodata.Config{Places: 1000, Today: time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"name", "category", "description", "seo_description"} {
			if s, ok := r[k].(string); ok {
				texts = append(texts, s)
			}
		}
	}
	if len(texts) < 1000 {
		t.Fatalf("only %d texts from the demo catalog", len(texts))
	}
	words := 0
	for _, text := range texts {
		got, exp := lettersTokenizer{}.Tokenize([]byte(text)), regexpWords([]byte(text))
		if g, e := describe(got), describe(exp); g != e {
			t.Fatalf("%q:\n got %s\nwant %s", text, g, e)
		}
		words += len(got)
	}
	if words < 5000 {
		t.Fatalf("only %d words compared", words)
	}
}

var wordsRegexp = goregexp.MustCompile(`[\p{L}\p{N}]+`)

// regexpWords are the tokens bleve's regexp tokenizer makes of input with wordsRegexp.
func regexpWords(input []byte) analysis.TokenStream {
	var out analysis.TokenStream
	for i, m := range wordsRegexp.FindAllIndex(input, -1) {
		out = append(out, &analysis.Token{Term: input[m[0]:m[1]], Start: m[0], End: m[1], Position: i + 1})
	}
	return out
}

func describe(ts analysis.TokenStream) string {
	var b bytes.Buffer
	for _, t := range ts {
		fmt.Fprintf(&b, "[%q %d-%d @%d] ", t.Term, t.Start, t.End, t.Position)
	}
	return b.String()
}

func BenchmarkTokenizers(b *testing.B) {
	text := []byte("Joe's Bar-B-Q & Smokehouse: slow-smoked brisket, pulled pork and burnt ends since 1987, Café Ñandú food.restaurant.bbq")
	b.Run("letters", func(b *testing.B) {
		for range b.N {
			lettersTokenizer{}.Tokenize(text)
		}
	})
	b.Run("regexp", func(b *testing.B) {
		for range b.N {
			regexpWords(text)
		}
	})
}

// An index built before the letters tokenizer stored bleve's regexp tokenizer in its mapping;
// it opens, and its text search finds what it did.
func TestAnIndexBuiltWithTheRegexpTokenizerStillOpensAndSearches(t *testing.T) {
	dir := t.TempDir()
	m, err := newMapping()
	if err != nil {
		t.Fatal(err)
	}
	m.(*mapping.IndexMappingImpl).CustomAnalysis.Tokenizers["place_letters"] = map[string]any{
		"type": "regexp", "regexp": `[\p{L}\p{N}]+`,
	}
	old, err := bleve.New(filepath.Join(dir, genName(1)), m)
	if err != nil {
		t.Fatal(err)
	}
	g := &generation{name: genName(1), bleve: old, points: newGrid(), ranking: newRanking()}
	docs := []placeindex.Doc{
		{PlaceID: "p1", Name: "Joe's Bar-B-Q", Category: "food.restaurant.bbq"},
		{PlaceID: "p2", Name: "Café Ñandú", Category: "food.cafe"},
	}
	if err := g.Upsert(context.Background(), docs, nil, "7/7"); err != nil {
		t.Fatal(err)
	}
	if err := g.close(); err != nil {
		t.Fatal(err)
	}
	if err := writeCurrent(dir, genName(1)); err != nil {
		t.Fatal(err)
	}
	idx, err := Open(dir)
	if err != nil {
		t.Fatalf("an index built with the regexp tokenizer does not open: %v", err)
	}
	defer idx.Close()
	for q, want := range map[string]string{"bar b q": "p1", "nandu": "p2", "restaur": "p1"} {
		res, err := idx.List(context.Background(), placeindex.ListQuery{Q: q})
		if err != nil || len(res.Hits) != 1 || res.Hits[0].PlaceID != want {
			t.Fatalf("%q: %+v %v, want %s", q, res, err, want)
		}
	}
}
