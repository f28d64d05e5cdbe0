package bleveindex

import (
	"fmt"
	"sync"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// TestAListPageIsOneStateOfTheRankingWhileImportsChangeIt: a page is read from the ranking
// while imports delete and put back its best places. Every page must be the page of some state
// the ranking was in: ten different places, best first. (Its heap pointed into the ranking
// and was sorted and read after the lock was let go: a delete moving the last place into a
// kept slot gave a page naming one place twice.)
func TestAListPageIsOneStateOfTheRankingWhileImportsChangeIt(t *testing.T) {
	r := newRanking()
	var docs []placeindex.Doc
	for i := range 200 {
		docs = append(docs, placeindex.Doc{PlaceID: fmt.Sprintf("p%03d", i), TownSlug: "lexington", RatingCount: i})
	}
	r.apply(docs, nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			d := docs[190+n%10]
			r.apply(nil, []string{d.PlaceID})
			r.apply([]placeindex.Doc{d}, nil)
		}
	}()
	for range 20000 {
		page := r.list("lex", 10, 0)
		seen := map[string]bool{}
		for _, h := range page.Hits {
			if seen[h.PlaceID] {
				close(stop)
				wg.Wait()
				t.Fatalf("page %v names %s twice", page.Hits, h.PlaceID)
			}
			seen[h.PlaceID] = true
		}
		if len(page.Hits) != 10 {
			close(stop)
			wg.Wait()
			t.Fatalf("page of %d places, want 10", len(page.Hits))
		}
	}
	close(stop)
	wg.Wait()
}
