package bleveindex

import (
	"context"
	"slices"
	"testing"

	"github.com/blevesearch/bleve/v2"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// TestAQPageIsThePageBlevesCollectorSortsOut: the page qPage keeps of a q search is the page
// bleve's own collector gives sorting every match by qOrder, ties across the page's ends
// included, and so is the total: for many q's, towns, pages and offsets past the end.
func TestAQPageIsThePageBlevesCollectorSortsOut(t *testing.T) {
	ctx := context.Background()
	g, queries := rankingFixture(t)
	tiedAtAnEnd := 0
	for _, q := range queries {
		for _, town := range []string{"", "le", "lexington"} {
			text, err := textQuery(g.bleve.Mapping(), q)
			if err != nil {
				t.Fatal(err)
			}
			if text == nil {
				continue
			}
			root := bleve.NewBooleanQuery()
			root.AddMust(text)
			if town != "" {
				p := bleve.NewPrefixQuery(town)
				p.SetField(fieldTownSlug)
				root.AddFilter(p)
			}
			all := bleve.NewSearchRequestOptions(root, 10000, 0, false)
			all.SortBy(qOrder)
			every, err := g.bleve.SearchInContext(ctx, all)
			if err != nil {
				t.Fatal(err)
			}
			for _, pg := range [][2]int{{20, 0}, {1, 0}, {3, 2}, {7, 5}, {10, 30}, {50, 100}, {5, 1e6}, {1000, 0}} {
				limit, offset := pg[0], pg[1]
				got, err := g.list(ctx, placeindex.ListQuery{Q: q, TownPrefix: town, Limit: limit, Offset: offset})
				if err != nil {
					t.Fatal(err)
				}
				req := bleve.NewSearchRequestOptions(root, limit, offset, false)
				req.SortBy(qOrder)
				want, err := g.bleve.SearchInContext(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				var gotIDs, wantIDs []string
				for _, h := range got.Hits {
					gotIDs = append(gotIDs, h.PlaceID)
				}
				for _, h := range want.Hits {
					wantIDs = append(wantIDs, h.ID)
				}
				if !slices.Equal(gotIDs, wantIDs) || got.Total != int(want.Total) {
					t.Errorf("q=%q town=%q limit %d offset %d: %v of %d, want %v of %d", q, town, limit, offset, gotIDs, got.Total, wantIDs, want.Total)
				}
				// Count the pages whose first or last place ties with the match before or after it.
				hits := every.Hits
				for _, end := range []int{offset - 1, offset + limit - 1} {
					if end >= 0 && end+1 < len(hits) && hits[end].Score == hits[end+1].Score {
						tiedAtAnEnd++
					}
				}
			}
		}
	}
	if tiedAtAnEnd < 50 {
		t.Errorf("only %d pages end among places of the same score: the test compares too little", tiedAtAnEnd)
	}
	t.Logf("%d pages end among places of the same score", tiedAtAnEnd)
}
