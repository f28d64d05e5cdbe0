package bleveindex

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search/query"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// rankingFixture is a generation of places named and described with a few words (so many
// tie), written in several batches that replace and delete places, and the q's to search it.
func rankingFixture(t *testing.T) (*generation, []string) {
	t.Helper()
	ctx := context.Background()
	g, err := createGeneration(t.TempDir(), genName(1), &writeReport{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.close() })

	vocab := []string{"bourbon", "barrel", "bar", "b", "tavern", "tap", "café", "cafe", "ᴄᴀꜰᴇ", "a⑽b", "10", "x⒜",
		"supercalifragilisticexpialidocious", "supercalifragilisticexpialidociouz", "hot", "brown", "derby", "1234"}
	r := rand.New(rand.NewPCG(7, 8))
	phrase := func(n int) string {
		ws := make([]string, r.IntN(n+1))
		for i := range ws {
			ws[i] = vocab[r.IntN(len(vocab))]
		}
		return strings.Join(ws, " ")
	}
	towns := []string{"lexington", "louisville", "lebanon", ""}
	for batch := range 4 {
		var docs []placeindex.Doc
		for i := range 500 {
			docs = append(docs, placeindex.Doc{
				PlaceID:     fmt.Sprintf("p%04d", r.IntN(1500)),
				Name:        phrase(4),
				Category:    []string{"food.bar", "bourbon.bar", "food.cafe"}[r.IntN(3)],
				Description: phrase(8),
				TownSlug:    towns[r.IntN(len(towns))],
				RatingCount: i,
			})
		}
		// Places alike but for their id and town tie on every q that matches them.
		for i := range 40 {
			docs = append(docs, placeindex.Doc{PlaceID: fmt.Sprintf("q%d%03d", batch, 999-i*7), Name: "Bourbon Tap 10",
				Category: "food.bar", Description: "Hot brown bar", TownSlug: towns[i%len(towns)]})
		}
		var deletes []string
		for range 50 {
			deletes = append(deletes, fmt.Sprintf("p%04d", r.IntN(1500)))
		}
		if err := g.Upsert(ctx, docs, deletes, fmt.Sprint(batch)); err != nil {
			t.Fatal(err)
		}
	}

	queries := []string{"bourb", "b", "bourbon tavern", "bar b", "cafe café", "a⑽b", "a⑽b 10", "x⒜ tap",
		"supercalifragilisticexpialidocious", "supercalifragilisticexp", "supercalifragilisticexpialidociouz bar",
		"hot brown", "derby 1234", "b b b", "Ⓑourbon", "t c b h"}
	for range 40 {
		queries = append(queries, phrase(4))
	}
	return g, queries
}

// TestNameSpiesCountAsNameSearchersOfTheirOwn: the text searcher's own name terms (nameSpy)
// tell which places' names hold a word exactly as a name searcher of its own (nameCursor)
// does: every match of every q gets the same score, so the order, ties and totals are the
// same, through town filters and through documents replaced and deleted (several segments).
func TestNameSpiesCountAsNameSearchersOfTheirOwn(t *testing.T) {
	ctx := context.Background()
	g, queries := rankingFixture(t)
	matched := 0
	for _, q := range queries {
		for _, town := range []string{"", "le", "lexington"} {
			spied, err := textQuery(g.bleve.Mapping(), q)
			if err != nil {
				t.Fatal(err)
			}
			nf, ok := spied.(nameFirstQuery)
			if !ok {
				continue // no words, or a word of no letter
			}
			own := nf
			own.tokens = append([]nameToken(nil), nf.tokens...)
			for i := range own.tokens {
				own.tokens[i].spied = false
			}
			search := func(text query.Query) []string {
				root := bleve.NewBooleanQuery()
				root.AddMust(text)
				if town != "" {
					p := bleve.NewPrefixQuery(town)
					p.SetField(fieldTownSlug)
					root.AddFilter(p)
				}
				req := bleve.NewSearchRequestOptions(root, 10000, 0, false)
				req.SortBy([]string{"-_score", fieldPlaceID})
				res, err := g.bleve.SearchInContext(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				got := []string{fmt.Sprint(res.Total)}
				for _, h := range res.Hits {
					got = append(got, fmt.Sprintf("%s=%v", h.ID, h.Score))
				}
				return got
			}
			want, got := search(own), search(nf)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("q=%q town=%q:\n spied %v\n own   %v", q, town, got, want)
			}
			if len(want) > 1 {
				matched++
			}
		}
	}
	if matched < len(queries) {
		t.Errorf("only %d of %d searches match a place: the test compares too little", matched, 3*len(queries))
	}
}
