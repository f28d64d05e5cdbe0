package bleveindex

import (
	"container/heap"
	"slices"
	"strings"
	"sync"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// ranked is what the place list without q needs of a place.
type ranked struct {
	id     string
	town   string
	rating int
}

// before is the place list order without q: rating count desc, then place id.
func (a *ranked) before(b *ranked) bool {
	if a.rating != b.rating {
		return a.rating > b.rating
	}
	return a.id < b.id
}

// ranking holds every place of one generation for the place list without q.
// Sorting all 150,000 places by rating in bleve takes about 100 ms; a scan
// with a bounded heap here takes a few.
type ranking struct {
	mu     sync.RWMutex
	places []ranked
	at     map[string]int // place id to its index in places
}

func newRanking() *ranking { return &ranking{at: map[string]int{}} }

// apply puts docs and then removes deleteIDs, mirroring the bleve batch.
func (r *ranking) apply(docs []placeindex.Doc, deleteIDs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range docs {
		r.put(ranked{id: d.PlaceID, town: d.TownSlug, rating: d.RatingCount})
	}
	for _, id := range deleteIDs {
		i, ok := r.at[id]
		if !ok {
			continue
		}
		last := len(r.places) - 1
		r.places[i] = r.places[last]
		r.at[r.places[i].id] = i
		r.places[last] = ranked{}
		r.places = r.places[:last]
		delete(r.at, id)
	}
}

func (r *ranking) put(p ranked) {
	if i, ok := r.at[p.id]; ok {
		r.places[i] = p
		return
	}
	r.at[p.id] = len(r.places)
	r.places = append(r.places, p)
}

// list answers the place list without q.
func (r *ranking) list(townPrefix string, limit, offset int) placeindex.Result {
	keep := offset + limit
	// worst is a max-heap on list order: its root is the last place kept so
	// far, the one a better place evicts.
	worst := &pageHeap{}
	total := 0
	r.mu.RLock()
	for i := range r.places {
		p := &r.places[i]
		if !strings.HasPrefix(p.town, townPrefix) {
			continue
		}
		total++
		if worst.Len() < keep {
			heap.Push(worst, p)
		} else if p.before((*worst)[0]) {
			(*worst)[0] = p
			heap.Fix(worst, 0)
		}
	}
	// The heap points into places, which an apply may change once the lock is let go: the
	// page is copied out under it.
	kept := make([]ranked, len(*worst))
	for i, p := range *worst {
		kept[i] = *p
	}
	r.mu.RUnlock()

	slices.SortFunc(kept, func(a, b ranked) int {
		if a.before(&b) {
			return -1
		}
		return 1
	})
	hits := []placeindex.Hit{}
	for _, p := range kept[min(offset, len(kept)):] {
		hits = append(hits, placeindex.Hit{PlaceID: p.id})
	}
	return placeindex.Result{Hits: hits, Total: total}
}

type pageHeap []*ranked

func (h pageHeap) Len() int           { return len(h) }
func (h pageHeap) Less(i, j int) bool { return h[j].before(h[i]) }
func (h pageHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pageHeap) Push(x any)        { *h = append(*h, x.(*ranked)) }
func (h *pageHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
