package bleveindex

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	goregexp "regexp"
	"testing"
	"time"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/tokenizer/regexp"

	"github.com/kyapi/kyapi/demodata"
)

// The letters tokenizer makes the words bleve's regexp tokenizer made with [\p{L}\p{N}]+ (the
// tokenizer of the indexes built before it): same terms, offsets and positions, over every
// text of a demo catalog and the edges of Unicode.
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
	want := regexp.NewRegexpTokenizer(goregexp.MustCompile(`[\p{L}\p{N}]+`))
	words := 0
	for _, text := range texts {
		got, exp := lettersTokenizer{}.Tokenize([]byte(text)), want.Tokenize([]byte(text))
		if g, e := describe(got), describe(exp); g != e {
			t.Fatalf("%q:\n got %s\nwant %s", text, g, e)
		}
		words += len(got)
	}
	if words < 5000 {
		t.Fatalf("only %d words compared", words)
	}
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
		r := regexp.NewRegexpTokenizer(goregexp.MustCompile(`[\p{L}\p{N}]+`))
		for range b.N {
			r.Tokenize(text)
		}
	})
}
