package bleveindex

import (
	"unicode"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/registry"
)

// lettersTokenizerName is the tokenizer that makes words of runs of letters and digits: the
// tokens of bleve's regexp tokenizer with `[\p{L}\p{N}]+`, found by a loop over the runes
// instead of the regexp engine, which was a tenth of the embedded index's build time.
const lettersTokenizerName = "kyapi_letters"

// lettersTokenizer implements analysis.Tokenizer.
type lettersTokenizer struct{}

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsNumber(r)
}

// Tokenize returns each maximal run of letters and digits, with its byte offsets and its
// 1-based position. Bytes that are not valid UTF-8 are not letters (the regexp engine reads
// them as U+FFFD, which is not one either). The words are counted first, so that the tokens
// take one allocation.
func (lettersTokenizer) Tokenize(input []byte) analysis.TokenStream {
	n := 0
	eachWord(input, func(int, int) { n++ })
	tokens := make([]analysis.Token, n)
	out := make(analysis.TokenStream, n)
	i := 0
	eachWord(input, func(start, end int) {
		tokens[i] = analysis.Token{Term: input[start:end], Start: start, End: end, Position: i + 1, Type: tokenType(input[start:end])}
		out[i] = &tokens[i]
		i++
	})
	return out
}

// eachWord calls fn with the byte offsets of each maximal run of letters and digits in input.
func eachWord(input []byte, fn func(start, end int)) {
	start := -1
	for i := 0; i < len(input); {
		r, size := rune(input[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRune(input[i:])
		}
		switch word := isWordRune(r); {
		case word && start < 0:
			start = i
		case !word && start >= 0:
			fn(start, i)
			start = -1
		}
		i += size
	}
	if start >= 0 {
		fn(start, len(input))
	}
}

// tokenType is the type the regexp tokenizer gives a word: ideographic when it holds a Han,
// Hangul, Hiragana or Katakana rune, numeric when it is all digits, alphanumeric otherwise.
// Neither the lowercase nor the edge n-gram filter, nor the index, reads it.
func tokenType(word []byte) analysis.TokenType {
	digits := true
	for _, r := range string(word) {
		if r >= utf8.RuneSelf && unicode.In(r, unicode.Han, unicode.Hangul, unicode.Hiragana, unicode.Katakana) {
			return analysis.Ideographic
		}
		digits = digits && '0' <= r && r <= '9'
	}
	if digits {
		return analysis.Numeric
	}
	return analysis.AlphaNumeric
}

func init() {
	err := registry.RegisterTokenizer(lettersTokenizerName, func(map[string]any, *registry.Cache) (analysis.Tokenizer, error) {
		return lettersTokenizer{}, nil
	})
	if err != nil {
		panic(err)
	}
}
