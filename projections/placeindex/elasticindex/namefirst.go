package elasticindex

import (
	"strings"
	"unicode/utf8"

	"github.com/elastic/go-elasticsearch/v8/typedapi/types"
	"github.com/elastic/go-elasticsearch/v8/typedapi/types/enums/operator"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// squashScore maps a place's text score s to s/(1+s): the order of the text scores is kept,
// within [0, 1), so no text score weighs as much as one word of q more in the name.
const squashScore = "_score / (1 + _score)"

// nameFirst ranks the places text matches as the embedded index does (bleveindex's
// nameFirstQuery): by how many of the words of q their name holds, and then by text's score,
// so that "Names weigh more than descriptions in the relevance order" (docs/api.md, "Places")
// holds whatever the rest of a place says. A boost cannot promise it: a text score grows with
// how often and in how short a field a word occurs, so a short description saying the word
// twice outscored a long name saying it once.
//
// The score is names + s/(1+s), where s is text's score (script_score) and names the count of
// the should clauses, one per word of q, that score 1 each when the name holds the word
// (constant_score). The should clauses do not change which places match: with a must clause
// they are optional, minimum_should_match 0 (the default then, set all the same).
func nameFirst(b *types.BoolQuery, text types.Query, words []string) {
	source := squashScore
	b.Must = append(b.Must, types.Query{ScriptScore: &types.ScriptScoreQuery{Query: text, Script: types.Script{Source: &source}}})
	b.Should = append(b.Should, nameClauses(words)...)
	b.MinimumShouldMatch = 0
}

// nameClauses is one clause per word of words, counted once per folded form as the embedded
// index counts it ("café" and "cafe" are one word of the name), that scores 1 when the word
// prefixes a word of the name.
func nameClauses(words []string) []types.Query {
	var clauses []types.Query
	seen := map[string]bool{}
	for _, w := range words {
		folded := placeindex.FoldedWords(w)
		key := strings.Join(folded, " ")
		if key == "" {
			key = w // folds to no word at all: its own clause, as its text clause is
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		one := float32(1)
		clauses = append(clauses, types.Query{ConstantScore: &types.ConstantScoreQuery{Filter: nameQuery(w, folded), Boost: &one}})
	}
	return clauses
}

// nameQuery matches places where word prefixes a word of the name, as the embedded index
// tells it (bleveindex's nameQuery): a word that folds to more than maxGram characters is
// taken for a prefix of a name word when its first maxGram characters are, which the n-grams
// of name.grams hold. Elasticsearch folds what it is sent, so the first maxGram characters of
// the folded word are sent rather than word. A word that folds into several words ("a⑽b" is
// "a(10)b", one word in Elasticsearch, which folds after splitting) cannot be cut so: when it
// may fold to more than maxGram characters (as in wordQuery), match_bool_prefix on the whole
// words of the name tells whether it prefixes one.
func nameQuery(word string, folded []string) types.Query {
	grams := word
	if len(folded) == 1 && utf8.RuneCountInString(folded[0]) > maxGram {
		grams = string([]rune(folded[0])[:maxGram])
	}
	and := operator.And
	inGrams := types.Query{Match: map[string]types.MatchQuery{"name.grams": {Query: grams, Operator: &and}}}
	if grams != word || 4*len(word) <= 3*maxGram {
		return inGrams
	}
	return types.Query{Bool: &types.BoolQuery{MinimumShouldMatch: 1, Should: []types.Query{
		inGrams,
		{MatchBoolPrefix: map[string]types.MatchBoolPrefixQuery{"name": {Query: word, Operator: &and}}},
	}}}
}
