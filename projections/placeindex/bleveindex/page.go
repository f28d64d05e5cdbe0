package bleveindex

import (
	"container/heap"
	"context"
	"slices"

	"github.com/blevesearch/bleve/v2/search"
)

// qOrder is the order of a q search's places: score, highest first, then place id.
var qOrder = []string{"-_score", fieldPlaceID}

// qPage keeps the page of a q search as bleve's collector sorting by qOrder would, without
// reading every match's place id: the collector reads the sort values of each match before
// it compares it (for "b", 150,000 place ids, half the search's time), where a match scoring
// below the last place kept while offset+limit are kept cannot reach the page, whatever its id.
// Ties are broken as the collector breaks them: place id, then the order of the matches.
//
// The search sorts by score only, which needs no value read, and hands each match to
// handler (search.MakeDocumentMatchHandlerKey) instead of the collector's own heap.
type qPage struct {
	order   search.SortOrder
	scoring []bool
	desc    []bool
	keep    int
	offset  int
	// kept is a max-heap in order: kept[0] is the last place kept so far.
	kept []*search.DocumentMatch
	// ids are the page's place ids, once the search has ended.
	ids []string
}

func newQPage(limit, offset int) *qPage {
	order := search.ParseSortOrderStrings(qOrder)
	return &qPage{order: order, scoring: order.CacheIsScore(), desc: order.CacheDescending(), keep: offset + limit, offset: offset}
}

// context is ctx with the search's matches handed to p.
func (p *qPage) context(ctx context.Context) context.Context {
	return context.WithValue(ctx, search.MakeDocumentMatchHandlerKey, search.MakeDocumentMatchHandler(p.handler))
}

func (p *qPage) handler(sctx *search.SearchContext) (search.DocumentMatchHandler, bool, error) {
	dv, err := sctx.IndexReader.DocValueReader(p.order.RequiredFields())
	if err != nil {
		return nil, false, err
	}
	visit := p.order.UpdateVisitor
	return func(d *search.DocumentMatch) error {
		if d == nil {
			return p.finish(sctx)
		}
		if len(p.kept) == p.keep && d.Score < p.kept[0].Score {
			sctx.DocumentMatchPool.Put(d)
			return nil
		}
		// The sort values as the collector makes them; its score-only Sort is shared by
		// every match, not appended to.
		if err := dv.VisitDocValues(d.IndexInternalID, visit); err != nil {
			return err
		}
		d.Sort, d.DecodedSort = nil, d.DecodedSort[:0]
		p.order.Value(d)
		if len(p.kept) < p.keep {
			heap.Push(p, d)
			return nil
		}
		if p.compare(d, p.kept[0]) >= 0 {
			sctx.DocumentMatchPool.Put(d)
			return nil
		}
		sctx.DocumentMatchPool.Put(p.kept[0])
		p.kept[0] = d
		heap.Fix(p, 0)
		return nil
	}, false, nil
}

func (p *qPage) compare(a, b *search.DocumentMatch) int {
	return p.order.Compare(p.scoring, p.desc, a, b)
}

// finish sorts the places kept and reads the ids of the page's, while the search's reader is
// open.
func (p *qPage) finish(sctx *search.SearchContext) error {
	slices.SortFunc(p.kept, p.compare)
	for _, d := range p.kept[min(p.offset, len(p.kept)):] {
		id, err := sctx.IndexReader.ExternalID(d.IndexInternalID)
		if err != nil {
			return err
		}
		p.ids = append(p.ids, id)
	}
	return nil
}

// heap.Interface, on kept.
func (p *qPage) Len() int           { return len(p.kept) }
func (p *qPage) Less(i, j int) bool { return p.compare(p.kept[i], p.kept[j]) > 0 }
func (p *qPage) Swap(i, j int)      { p.kept[i], p.kept[j] = p.kept[j], p.kept[i] }
func (p *qPage) Push(x any)         { p.kept = append(p.kept, x.(*search.DocumentMatch)) }
func (p *qPage) Pop() any {
	x := p.kept[len(p.kept)-1]
	p.kept = p.kept[:len(p.kept)-1]
	return x
}
