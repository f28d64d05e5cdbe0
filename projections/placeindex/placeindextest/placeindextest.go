// Package placeindextest is the contract suite every placeindex.Index adapter
// must pass. Adapter packages call Run from their own tests with a function
// that opens a fresh, empty index.
package placeindextest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// Option adjusts what Run exercises.
type Option func(*suite)

// WithReopen enables the subtests that close an index and open the same
// storage again. reopen must close old and return the reopened index.
func WithReopen(reopen func(t *testing.T, old placeindex.Index) placeindex.Index) Option {
	return func(s *suite) { s.reopen = reopen }
}

type suite struct {
	open   func(t *testing.T) placeindex.Index
	reopen func(t *testing.T, old placeindex.Index) placeindex.Index
}

// Run runs the contract suite. open must return a fresh, empty index for the
// given subtest and arrange its cleanup.
func Run(t *testing.T, open func(t *testing.T) placeindex.Index, opts ...Option) {
	s := &suite{open: open}
	for _, o := range opts {
		o(s)
	}

	t.Run("list without q orders by rating count then place id", s.listOrdersByRatingCount)
	t.Run("list with a town prefix keeps only towns starting with it", s.listFiltersByTownPrefix)
	t.Run("q matches a word prefix regardless of case", s.qMatchesPrefixCaseInsensitive)
	t.Run("q matches prefixes of very long words and ignores accents", s.qLongWordsAndAccents)
	t.Run("q with several words requires every word to match", s.qRequiresEveryWord)
	t.Run("q searches category and description as well as name", s.qSearchesCategoryAndDescription)
	t.Run("q ranks a name match above a description-only match", s.qRanksNameAboveDescription)
	t.Run("q and town combine with AND", s.qAndTownCombine)
	t.Run("limit and offset page the results while Total counts every match", s.listPages)
	t.Run("upsert replaces an existing place instead of duplicating it", s.upsertReplaces)
	t.Run("re-applying the same batch is harmless", s.upsertIdempotent)
	t.Run("an upsert never replaces a newer version of a place", s.upsertKeepsNewerVersion)
	t.Run("delete removes a place from list and near", s.deleteRemoves)
	t.Run("checkpoint is empty on a new index and round-trips", s.checkpointRoundTrips)
	if s.reopen != nil {
		t.Run("checkpoint and places survive reopening the index", s.survivesReopen)
	}
	t.Run("near orders places nearest first", s.nearOrdersByDistance)
	t.Run("near excludes a place just outside the radius", s.nearExcludesOutsideRadius)
	t.Run("near reports the exact haversine distance", s.nearReportsHaversine)
	t.Run("near category prefix matches whole namespace segments only", s.nearCategoryPrefix)
	t.Run("near leaves out the excluded place", s.nearExcludeID)
	t.Run("near never returns places without a location", s.nearSkipsUnlocated)
	t.Run("near pages with limit and offset while Total counts every match", s.nearPages)
	t.Run("near with a radius holding the whole Earth finds the other side of it", s.nearAnywhere)
	t.Run("rebuild replaces the whole content and checkpoint", s.rebuildReplaces)
	t.Run("readers see the old generation while rebuild fills the new one", s.rebuildIsolatesReaders)
	t.Run("a failed rebuild keeps the old generation", s.rebuildFailureKeepsOld)
}

// Lexington city centre; geo fixtures are placed at exact offsets from it.
var center = placeindex.GeoPoint{Lat: 38.0406, Lng: -84.5037}

// offset returns the point at distanceKm from p along bearingDeg on the same
// sphere the index measures on.
func offset(p placeindex.GeoPoint, distanceKm, bearingDeg float64) *placeindex.GeoPoint {
	const rad = math.Pi / 180
	d := distanceKm / placeindex.EarthRadiusKm
	lat1, lng1, b := p.Lat*rad, p.Lng*rad, bearingDeg*rad
	lat2 := math.Asin(math.Sin(lat1)*math.Cos(d) + math.Cos(lat1)*math.Sin(d)*math.Cos(b))
	lng2 := lng1 + math.Atan2(math.Sin(b)*math.Sin(d)*math.Cos(lat1), math.Cos(d)-math.Sin(lat1)*math.Sin(lat2))
	return &placeindex.GeoPoint{Lat: lat2 / rad, Lng: lng2 / rad}
}

func listFixtures() []placeindex.Doc {
	return []placeindex.Doc{
		{PlaceID: "p-buffalo", Name: "Buffalo Trace Distillery", Category: "attraction.distillery", Description: "Historic bourbon distillery on the Kentucky River.", TownSlug: "frankfort", RatingCount: 900},
		{PlaceID: "p-woodford", Name: "Woodford Reserve", Category: "attraction.distillery", Description: "Bourbon tasting in horse country.", TownSlug: "versailles", RatingCount: 700},
		{PlaceID: "p-county", Name: "County Club", Category: "food.restaurant.bbq", Description: "Smoked meats in a former bakery garage.", TownSlug: "lexington", RatingCount: 500},
		{PlaceID: "p-alfalfa", Name: "Alfalfa Restaurant", Category: "food.restaurant", Description: "Breakfast and local bourbon cocktails.", TownSlug: "lexington", RatingCount: 500},
		{PlaceID: "p-proof", Name: "Proof on Main", Category: "food.restaurant", Description: "Contemporary dining in a gallery hotel.", TownSlug: "louisville", RatingCount: 300},
		{PlaceID: "p-lexcafe", Name: "Lexie's Cafe", Category: "food.cafe", Description: "Coffee and pastries.", TownSlug: "lexington-east", RatingCount: 40},
		{PlaceID: "p-notown", Name: "Roadside Stand", Category: "shopping.market", Description: "Seasonal produce.", TownSlug: "", RatingCount: 5},
	}
}

func ids(r placeindex.Result) []string {
	out := make([]string, len(r.Hits))
	for i, h := range r.Hits {
		out[i] = h.PlaceID
	}
	return out
}

func mustUpsert(t *testing.T, w placeindex.Writer, docs []placeindex.Doc, deleteIDs []string, checkpoint string) {
	t.Helper()
	if err := w.Upsert(context.Background(), docs, deleteIDs, checkpoint); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
}

func mustList(t *testing.T, idx placeindex.Index, q placeindex.ListQuery) placeindex.Result {
	t.Helper()
	r, err := idx.List(context.Background(), q)
	if err != nil {
		t.Fatalf("List(%+v): %v", q, err)
	}
	return r
}

func mustNear(t *testing.T, idx placeindex.Index, q placeindex.GeoQuery) placeindex.Result {
	t.Helper()
	r, err := idx.Near(context.Background(), q)
	if err != nil {
		t.Fatalf("Near(%+v): %v", q, err)
	}
	return r
}

func wantIDs(t *testing.T, what string, r placeindex.Result, want ...string) {
	t.Helper()
	if got := ids(r); !slices.Equal(got, want) {
		t.Errorf("%s: got ids %v, want %v", what, got, want)
	}
}

func wantSameIDs(t *testing.T, what string, r placeindex.Result, want ...string) {
	t.Helper()
	got := ids(r)
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: got ids %v, want (any order) %v", what, got, want)
	}
}

func (s *suite) withList(t *testing.T) placeindex.Index {
	idx := s.open(t)
	mustUpsert(t, idx, listFixtures(), nil, "c1")
	return idx
}

func (s *suite) listOrdersByRatingCount(t *testing.T) {
	idx := s.withList(t)
	r := mustList(t, idx, placeindex.ListQuery{Limit: 100})
	wantIDs(t, "all places", r, "p-buffalo", "p-woodford", "p-alfalfa", "p-county", "p-proof", "p-lexcafe", "p-notown")
	if r.Total != 7 {
		t.Errorf("Total = %d, want 7", r.Total)
	}
	for _, h := range r.Hits {
		if h.DistanceKm != 0 {
			t.Errorf("%s: DistanceKm = %v on a list hit, want 0", h.PlaceID, h.DistanceKm)
		}
	}
}

func (s *suite) listFiltersByTownPrefix(t *testing.T) {
	idx := s.withList(t)
	wantIDs(t, "town lexington", mustList(t, idx, placeindex.ListQuery{TownPrefix: "lexington", Limit: 100}),
		"p-alfalfa", "p-county", "p-lexcafe")
	wantIDs(t, "town prefix lex", mustList(t, idx, placeindex.ListQuery{TownPrefix: "lex", Limit: 100}),
		"p-alfalfa", "p-county", "p-lexcafe")
	wantIDs(t, "town prefix lexington-", mustList(t, idx, placeindex.ListQuery{TownPrefix: "lexington-", Limit: 100}),
		"p-lexcafe")
	r := mustList(t, idx, placeindex.ListQuery{TownPrefix: "paducah", Limit: 100})
	if len(r.Hits) != 0 || r.Total != 0 {
		t.Errorf("unknown town: got %v (Total %d), want nothing", ids(r), r.Total)
	}
}

func (s *suite) qMatchesPrefixCaseInsensitive(t *testing.T) {
	idx := s.withList(t)
	for _, q := range []string{"bourb", "BOURBON", "Bour"} {
		wantSameIDs(t, "q="+q, mustList(t, idx, placeindex.ListQuery{Q: q, Limit: 100}),
			"p-buffalo", "p-woodford", "p-alfalfa")
	}
	wantIDs(t, "q=distiller", mustList(t, idx, placeindex.ListQuery{Q: "distiller", Limit: 100}),
		"p-buffalo", "p-woodford")
	// A prefix must start a token: "ourbon" is inside "bourbon", not at its start.
	r := mustList(t, idx, placeindex.ListQuery{Q: "ourbon", Limit: 100})
	if r.Total != 0 {
		t.Errorf("q=ourbon: got %v, want nothing", ids(r))
	}
	wantIDs(t, "q=lexie", mustList(t, idx, placeindex.ListQuery{Q: "lexie", Limit: 100}), "p-lexcafe")
}

func (s *suite) qLongWordsAndAccents(t *testing.T) {
	idx := s.open(t)
	mustUpsert(t, idx, []placeindex.Doc{
		{PlaceID: "long", Name: "Supercalifragilisticexpialidocious Sweets", Category: "food.dessert", RatingCount: 2},
		{PlaceID: "accent", Name: "Café Rosé", Category: "food.cafe", RatingCount: 1},
	}, nil, "c1")
	wantIDs(t, "q=supercalifragilisticexpiali", mustList(t, idx, placeindex.ListQuery{Q: "supercalifragilisticexpiali", Limit: 10}), "long")
	wantIDs(t, "q=supercalifragilisticexpialidocious", mustList(t, idx, placeindex.ListQuery{Q: "Supercalifragilisticexpialidocious", Limit: 10}), "long")
	if r := mustList(t, idx, placeindex.ListQuery{Q: "supercalifragilisticexpialidociousness", Limit: 10}); r.Total != 0 {
		t.Errorf("q longer than the word: got %v, want nothing", ids(r))
	}
	wantIDs(t, "q=cafe", mustList(t, idx, placeindex.ListQuery{Q: "cafe ros", Limit: 10}), "accent")
	wantIDs(t, "q=CAFÉ", mustList(t, idx, placeindex.ListQuery{Q: "CAFÉ", Limit: 10}), "accent")
}

func (s *suite) qRequiresEveryWord(t *testing.T) {
	idx := s.withList(t)
	wantIDs(t, "q=bourbon tasting", mustList(t, idx, placeindex.ListQuery{Q: "bourbon tasting", Limit: 100}), "p-woodford")
	wantIDs(t, "q=bour hist", mustList(t, idx, placeindex.ListQuery{Q: "bour hist", Limit: 100}), "p-buffalo")
	r := mustList(t, idx, placeindex.ListQuery{Q: "bourbon pastries", Limit: 100})
	if r.Total != 0 || len(r.Hits) != 0 {
		t.Errorf("q=bourbon pastries: got %v (Total %d), want nothing", ids(r), r.Total)
	}
}

func (s *suite) qSearchesCategoryAndDescription(t *testing.T) {
	idx := s.withList(t)
	wantIDs(t, "category word bbq", mustList(t, idx, placeindex.ListQuery{Q: "bbq", Limit: 100}), "p-county")
	wantSameIDs(t, "category prefix restaur", mustList(t, idx, placeindex.ListQuery{Q: "restaur", Limit: 100}),
		"p-county", "p-alfalfa", "p-proof")
	wantIDs(t, "description word pastr", mustList(t, idx, placeindex.ListQuery{Q: "pastr", Limit: 100}), "p-lexcafe")
	wantIDs(t, "words across fields", mustList(t, idx, placeindex.ListQuery{Q: "bbq smoked county", Limit: 100}), "p-county")
}

// docs/api.md, "Places": "Names weigh more than descriptions in the relevance order". A place
// whose name holds more of the words of q (as prefixes of its words) ranks above one whose name
// holds fewer, whatever its category and description say: a long name holding a word once ranks
// above a short description repeating it among many places that do not say it (which a text
// score alone ranks the other way), and a popular place gains nothing from its rating count.
// Among places whose names hold as many, the order is the text score's, which the contract
// leaves to each index; pages keep the order.
func (s *suite) qRanksNameAboveDescription(t *testing.T) {
	idx := s.open(t)
	docs := []placeindex.Doc{
		{PlaceID: "a-desc", Name: "Corner Tavern", Category: "food.bar", Description: "Neighbourhood bar with a long list of small-batch spirits and bourbon flights.", RatingCount: 1000},
		{PlaceID: "b-name", Name: "Bourbon Bar", Category: "food.bar", Description: "Cocktails.", RatingCount: 1},
		{PlaceID: "c-long-name", Name: "Old Kentucky Bourbon Barrel Tavern and Smokehouse Grill", Category: "food.bar",
			Description: "A tavern on Main Street serving smoked meats, local beer and live music on weekends."},
		{PlaceID: "d-short-desc", Name: "Zed Tap", Category: "food.bar", Description: "Bourbon tastings and bourbon flights."},
		{PlaceID: "e-long-word", Name: "Supercalifragilisticexpialidocious Sweets and Treats of Old Kentucky", Category: "food.dessert"},
		{PlaceID: "f-long-word-desc", Name: "Zed Sweets", Category: "food.dessert", Description: "Supercalifragilisticexpialidocious supercalifragilisticexpialidocious."},
	}
	for i := range 30 {
		docs = append(docs, placeindex.Doc{PlaceID: fmt.Sprintf("other-%02d", i), Name: "Corner Cafe", Category: "food.cafe", Description: "Coffee."})
	}
	mustUpsert(t, idx, docs, nil, "c1")
	for _, c := range []struct {
		q     string
		tiers [][]string // the places of a tier rank above those of the next, in any order of their own
	}{
		{"bourbon", [][]string{{"b-name", "c-long-name"}, {"a-desc", "d-short-desc"}}},
		{"bourb", [][]string{{"b-name", "c-long-name"}, {"a-desc", "d-short-desc"}}},
		{"BOURBON bourbon", [][]string{{"b-name", "c-long-name"}, {"a-desc", "d-short-desc"}}},
		{"bourbon tavern", [][]string{{"c-long-name"}, {"a-desc"}}},
		// Words longer than the n-grams, whole and as a prefix.
		{"supercalifragilisticexpialidocious", [][]string{{"e-long-word"}, {"f-long-word-desc"}}},
		{"supercalifragilisticexp", [][]string{{"e-long-word"}, {"f-long-word-desc"}}},
	} {
		all := mustList(t, idx, placeindex.ListQuery{Q: c.q, Limit: 100})
		got, rest := ids(all), ids(all)
		for _, tier := range c.tiers {
			if len(rest) < len(tier) || !slices.Equal(slices.Sorted(slices.Values(rest[:len(tier)])), tier) {
				t.Errorf("q=%q: got ids %v, want the tiers %v", c.q, got, c.tiers)
				rest = nil
				break
			}
			rest = rest[len(tier):]
		}
		if len(rest) > 0 {
			t.Errorf("q=%q: got ids %v, want the tiers %v", c.q, got, c.tiers)
		}
		var paged []string
		for offset := 0; offset < len(got); offset += 2 {
			page := mustList(t, idx, placeindex.ListQuery{Q: c.q, Limit: 2, Offset: offset})
			if page.Total != len(got) {
				t.Errorf("q=%q offset %d: Total %d, want %d", c.q, offset, page.Total, len(got))
			}
			paged = append(paged, ids(page)...)
		}
		if !slices.Equal(paged, got) {
			t.Errorf("q=%q: pages of 2 give %v, one page %v", c.q, paged, got)
		}
	}
}

func (s *suite) qAndTownCombine(t *testing.T) {
	idx := s.withList(t)
	wantIDs(t, "q=bourbon town=lex", mustList(t, idx, placeindex.ListQuery{Q: "bourbon", TownPrefix: "lex", Limit: 100}), "p-alfalfa")
	wantIDs(t, "q=bourbon town=fr", mustList(t, idx, placeindex.ListQuery{Q: "bourbon", TownPrefix: "fr", Limit: 100}), "p-buffalo")
	r := mustList(t, idx, placeindex.ListQuery{Q: "pastries", TownPrefix: "louisville", Limit: 100})
	if r.Total != 0 {
		t.Errorf("q=pastries town=louisville: got %v, want nothing", ids(r))
	}
}

func (s *suite) listPages(t *testing.T) {
	idx := s.withList(t)
	r := mustList(t, idx, placeindex.ListQuery{Limit: 2, Offset: 1})
	wantIDs(t, "offset 1 limit 2", r, "p-woodford", "p-alfalfa")
	if r.Total != 7 {
		t.Errorf("Total = %d, want 7", r.Total)
	}
	r = mustList(t, idx, placeindex.ListQuery{Limit: 5, Offset: 5})
	wantIDs(t, "last page", r, "p-lexcafe", "p-notown")
	r = mustList(t, idx, placeindex.ListQuery{Limit: 5, Offset: 50})
	if len(r.Hits) != 0 || r.Total != 7 {
		t.Errorf("past the end: got %v (Total %d), want no hits and Total 7", ids(r), r.Total)
	}
	r = mustList(t, idx, placeindex.ListQuery{Q: "bourbon", Limit: 1, Offset: 1})
	if len(r.Hits) != 1 || r.Total != 3 {
		t.Errorf("q page: got %v (Total %d), want one hit and Total 3", ids(r), r.Total)
	}
	all := ids(mustList(t, idx, placeindex.ListQuery{Q: "bourbon", Limit: 3}))
	if len(r.Hits) == 1 && len(all) == 3 && r.Hits[0].PlaceID != all[1] {
		t.Errorf("q page offset 1 = %s, want the second of %v", r.Hits[0].PlaceID, all)
	}
}

func (s *suite) upsertReplaces(t *testing.T) {
	idx := s.withList(t)
	changed := placeindex.Doc{PlaceID: "p-proof", Name: "Proof on Main", Category: "food.restaurant", Description: "Now serving bourbon flights.", TownSlug: "louisville", RatingCount: 2000, Location: &center}
	mustUpsert(t, idx, []placeindex.Doc{changed}, nil, "c2")
	r := mustList(t, idx, placeindex.ListQuery{Limit: 100})
	if r.Total != 7 || len(r.Hits) != 7 || r.Hits[0].PlaceID != "p-proof" {
		t.Errorf("after replace: got %v (Total %d), want p-proof first of 7", ids(r), r.Total)
	}
	wantSameIDs(t, "new description searchable", mustList(t, idx, placeindex.ListQuery{Q: "flights", Limit: 100}), "p-proof")
	if r := mustList(t, idx, placeindex.ListQuery{Q: "gallery", Limit: 100}); r.Total != 0 {
		t.Errorf("old description still matches: %v", ids(r))
	}
	wantIDs(t, "new location searchable", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 1, Limit: 10}), "p-proof")
	moved := changed
	moved.Location = offset(center, 30, 0)
	mustUpsert(t, idx, []placeindex.Doc{moved}, nil, "c3")
	if r := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 1, Limit: 10}); r.Total != 0 {
		t.Errorf("old location still matches: %v", ids(r))
	}
	wantIDs(t, "moved location", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 31, Limit: 10}), "p-proof")
}

func (s *suite) upsertKeepsNewerVersion(t *testing.T) {
	idx := s.open(t)
	newest := placeindex.Doc{PlaceID: "p-v", Name: "Zebra Newest", Category: "food.cafe", TownSlug: "paris", Location: &center, Version: 2}
	older := placeindex.Doc{PlaceID: "p-v", Name: "Yak Older", Category: "food.cafe", TownSlug: "paris", Location: offset(center, 30, 0), Version: 1}
	mustUpsert(t, idx, []placeindex.Doc{newest}, nil, "c1")
	mustUpsert(t, idx, []placeindex.Doc{older}, nil, "c2")
	check := func(when string) {
		t.Helper()
		wantIDs(t, when+": the newer name", mustList(t, idx, placeindex.ListQuery{Q: "zebra", Limit: 10}), "p-v")
		wantIDs(t, when+": not the older name", mustList(t, idx, placeindex.ListQuery{Q: "yak", Limit: 10}))
		wantIDs(t, when+": the newer location", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 1, Limit: 10}), "p-v")
	}
	check("after the older version")
	if cp, err := idx.Checkpoint(context.Background()); err != nil || cp != "c2" {
		t.Errorf("checkpoint %q, %v; want c2 even though its document was older", cp, err)
	}
	if s.reopen != nil {
		idx = s.reopen(t, idx)
		mustUpsert(t, idx, []placeindex.Doc{older}, nil, "c3")
		check("after reopening")
	}
	// The same version again applies (a redelivery), and so does a newer one.
	newer := newest
	newer.Name, newer.Version = "Zebra Renamed", 3
	mustUpsert(t, idx, []placeindex.Doc{newer}, nil, "c4")
	wantIDs(t, "a newer version", mustList(t, idx, placeindex.ListQuery{Q: "renamed", Limit: 10}), "p-v")
}

func (s *suite) upsertIdempotent(t *testing.T) {
	idx := s.open(t)
	docs := listFixtures()
	docs[0].Location = &center
	for range 2 {
		mustUpsert(t, idx, docs, []string{"p-notown", "never-existed"}, "c1")
	}
	r := mustList(t, idx, placeindex.ListQuery{Limit: 100})
	if r.Total != 6 || len(r.Hits) != 6 {
		t.Errorf("after applying twice: got %v (Total %d), want 6 places", ids(r), r.Total)
	}
	if n := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 1, Limit: 10}); n.Total != 1 {
		t.Errorf("near after applying twice: got %v, want one hit", ids(n))
	}
}

func (s *suite) deleteRemoves(t *testing.T) {
	idx := s.open(t)
	docs := listFixtures()
	docs[0].Location = &center
	mustUpsert(t, idx, docs, nil, "c1")
	mustUpsert(t, idx, nil, []string{"p-buffalo", "p-county"}, "c2")
	r := mustList(t, idx, placeindex.ListQuery{Limit: 100})
	wantIDs(t, "after delete", r, "p-woodford", "p-alfalfa", "p-proof", "p-lexcafe", "p-notown")
	if r.Total != 5 {
		t.Errorf("Total = %d, want 5", r.Total)
	}
	if r := mustList(t, idx, placeindex.ListQuery{Q: "bbq", Limit: 100}); r.Total != 0 {
		t.Errorf("deleted place still found by q: %v", ids(r))
	}
	if n := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 1, Limit: 10}); n.Total != 0 {
		t.Errorf("deleted place still found by near: %v", ids(n))
	}
	// The same batch may carry a doc and a delete for different places.
	mustUpsert(t, idx, []placeindex.Doc{docs[0]}, []string{"p-proof"}, "c3")
	wantIDs(t, "mixed batch", mustList(t, idx, placeindex.ListQuery{Limit: 100}),
		"p-buffalo", "p-woodford", "p-alfalfa", "p-lexcafe", "p-notown")
}

func (s *suite) checkpointRoundTrips(t *testing.T) {
	ctx := context.Background()
	idx := s.open(t)
	cp, err := idx.Checkpoint(ctx)
	if err != nil || cp != "" {
		t.Fatalf("new index: Checkpoint() = %q, %v; want \"\", nil", cp, err)
	}
	mustUpsert(t, idx, listFixtures(), nil, "stream:42")
	if cp, err = idx.Checkpoint(ctx); err != nil || cp != "stream:42" {
		t.Errorf("after upsert: Checkpoint() = %q, %v; want stream:42", cp, err)
	}
	mustUpsert(t, idx, nil, nil, "stream:43")
	if cp, err = idx.Checkpoint(ctx); err != nil || cp != "stream:43" {
		t.Errorf("after empty batch: Checkpoint() = %q, %v; want stream:43", cp, err)
	}
}

func (s *suite) survivesReopen(t *testing.T) {
	ctx := context.Background()
	idx := s.open(t)
	docs := listFixtures()
	docs[1].Location = offset(center, 2, 90)
	mustUpsert(t, idx, docs, nil, "stream:7")
	idx = s.reopen(t, idx)
	if cp, err := idx.Checkpoint(ctx); err != nil || cp != "stream:7" {
		t.Errorf("after reopen: Checkpoint() = %q, %v; want stream:7", cp, err)
	}
	if r := mustList(t, idx, placeindex.ListQuery{Limit: 100}); r.Total != 7 {
		t.Errorf("after reopen: %d places, want 7", r.Total)
	}
	wantIDs(t, "near after reopen", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 5, Limit: 10}), "p-woodford")

	// A rebuilt generation is the one that is reopened.
	err := idx.Rebuild(ctx, func(w placeindex.Writer) error {
		return w.Upsert(ctx, docs[:2], nil, "stream:8")
	})
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	idx = s.reopen(t, idx)
	if cp, err := idx.Checkpoint(ctx); err != nil || cp != "stream:8" {
		t.Errorf("after rebuild and reopen: Checkpoint() = %q, %v; want stream:8", cp, err)
	}
	wantIDs(t, "list after rebuild and reopen", mustList(t, idx, placeindex.ListQuery{Limit: 100}), "p-buffalo", "p-woodford")
	wantIDs(t, "near after rebuild and reopen", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 5, Limit: 10}), "p-woodford")
}

// geoFixtures places documents at known distances from center.
func geoFixtures() []placeindex.Doc {
	return []placeindex.Doc{
		{PlaceID: "g-1km", Name: "One", Category: "food.restaurant", Location: offset(center, 1, 45), RatingCount: 1},
		{PlaceID: "g-3km", Name: "Three", Category: "food.restaurant.bbq", Location: offset(center, 3, 200), RatingCount: 2},
		{PlaceID: "g-2km", Name: "Two", Category: "foodtruck", Location: offset(center, 2, 300), RatingCount: 3},
		{PlaceID: "g-4km", Name: "Four", Category: "food", Location: offset(center, 4, 120), RatingCount: 4},
		{PlaceID: "g-4km-b", Name: "Four again", Category: "shopping", Location: offset(center, 4, 120), RatingCount: 5},
		{PlaceID: "g-edge-in", Name: "Edge in", Category: "attraction", Location: offset(center, 4.99, 0), RatingCount: 6},
		{PlaceID: "g-edge-out", Name: "Edge out", Category: "attraction", Location: offset(center, 5.01, 0), RatingCount: 7},
		{PlaceID: "g-far", Name: "Far", Category: "food.restaurant", Location: offset(center, 80, 90), RatingCount: 8},
		{PlaceID: "g-nowhere", Name: "Nowhere", Category: "food.restaurant", Location: nil, RatingCount: 9},
	}
}

func (s *suite) withGeo(t *testing.T) placeindex.Index {
	idx := s.open(t)
	mustUpsert(t, idx, geoFixtures(), nil, "c1")
	return idx
}

func (s *suite) nearOrdersByDistance(t *testing.T) {
	idx := s.withGeo(t)
	r := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 5, Limit: 100})
	wantIDs(t, "within 5 km", r, "g-1km", "g-2km", "g-3km", "g-4km", "g-4km-b", "g-edge-in")
	if r.Total != 6 {
		t.Errorf("Total = %d, want 6", r.Total)
	}
	for i := 1; i < len(r.Hits); i++ {
		if r.Hits[i].DistanceKm < r.Hits[i-1].DistanceKm {
			t.Errorf("hit %d (%s, %v km) nearer than hit %d", i, r.Hits[i].PlaceID, r.Hits[i].DistanceKm, i-1)
		}
	}
	wantIDs(t, "within 100 km", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 100, Limit: 100}),
		"g-1km", "g-2km", "g-3km", "g-4km", "g-4km-b", "g-edge-in", "g-edge-out", "g-far")
}

func (s *suite) nearAnywhere(t *testing.T) {
	idx := s.withGeo(t)
	antipode := placeindex.GeoPoint{Lat: -center.Lat, Lng: center.Lng + 180}
	mustUpsert(t, idx, []placeindex.Doc{
		{PlaceID: "w-sydney", Name: "Sydney", Category: "food.restaurant", Location: &placeindex.GeoPoint{Lat: -33.8688, Lng: 151.2093}},
		{PlaceID: "w-antipode", Name: "Antipode", Category: "food.cafe", Location: offset(antipode, 1, 0)},
		{PlaceID: "w-pole", Name: "Pole", Category: "food", Location: &placeindex.GeoPoint{Lat: -90, Lng: 0}},
	}, nil, "c2")
	r := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: placeindex.AnywhereKm, CategoryPrefix: "food", Limit: 100})
	wantIDs(t, "food anywhere", r, "g-1km", "g-3km", "g-4km", "g-far", "w-pole", "w-sydney", "w-antipode")
	if r.Total != 7 {
		t.Errorf("Total = %d, want 7", r.Total)
	}
	last := r.Hits[len(r.Hits)-1]
	if want := placeindex.DistanceKm(center, *offset(antipode, 1, 0)); math.Abs(last.DistanceKm-want) > 1e-6 {
		t.Errorf("antipode at %v km, want %v", last.DistanceKm, want)
	}
	wantIDs(t, "the nearest two", mustNear(t, idx, placeindex.GeoQuery{Center: antipode, RadiusKm: placeindex.AnywhereKm, Limit: 2}),
		"w-antipode", "w-sydney")
}

func (s *suite) nearExcludesOutsideRadius(t *testing.T) {
	idx := s.withGeo(t)
	r := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 5, CategoryPrefix: "attraction", Limit: 100})
	wantIDs(t, "radius 5", r, "g-edge-in")
	r = mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 0.5, Limit: 100})
	if r.Total != 0 || len(r.Hits) != 0 {
		t.Errorf("radius 0.5: got %v, want nothing", ids(r))
	}
}

func (s *suite) nearReportsHaversine(t *testing.T) {
	idx := s.withGeo(t)
	byID := map[string]placeindex.GeoPoint{}
	for _, d := range geoFixtures() {
		if d.Location != nil {
			byID[d.PlaceID] = *d.Location
		}
	}
	r := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 100, Limit: 100})
	if len(r.Hits) == 0 {
		t.Fatal("no hits")
	}
	for _, h := range r.Hits {
		want := placeindex.DistanceKm(center, byID[h.PlaceID])
		if math.Abs(h.DistanceKm-want) > 1e-6 {
			t.Errorf("%s: DistanceKm = %.9f, want %.9f", h.PlaceID, h.DistanceKm, want)
		}
	}
	if got := r.Hits[0].DistanceKm; math.Abs(got-1) > 1e-6 {
		t.Errorf("g-1km: DistanceKm = %.9f, want 1", got)
	}
}

func (s *suite) nearCategoryPrefix(t *testing.T) {
	idx := s.withGeo(t)
	wantIDs(t, "food", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 100, CategoryPrefix: "food", Limit: 100}),
		"g-1km", "g-3km", "g-4km", "g-far")
	wantIDs(t, "food.restaurant", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 100, CategoryPrefix: "food.restaurant", Limit: 100}),
		"g-1km", "g-3km", "g-far")
	wantIDs(t, "foodtruck", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 100, CategoryPrefix: "foodtruck", Limit: 100}),
		"g-2km")
	if r := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 100, CategoryPrefix: "foo", Limit: 100}); r.Total != 0 {
		t.Errorf("foo: got %v, want nothing", ids(r))
	}
}

func (s *suite) nearExcludeID(t *testing.T) {
	idx := s.withGeo(t)
	r := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 3.5, ExcludeID: "g-2km", Limit: 100})
	wantIDs(t, "without g-2km", r, "g-1km", "g-3km")
	if r.Total != 2 {
		t.Errorf("Total = %d, want 2", r.Total)
	}
}

func (s *suite) nearSkipsUnlocated(t *testing.T) {
	idx := s.withGeo(t)
	for _, radius := range []float64{5, 50, 20000} {
		r := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: radius, Limit: 100})
		if slices.Contains(ids(r), "g-nowhere") {
			t.Errorf("radius %v: place without location returned", radius)
		}
	}
	// A place that loses its location leaves geo search.
	mustUpsert(t, idx, []placeindex.Doc{{PlaceID: "g-1km", Name: "One", Category: "food.restaurant"}}, nil, "c2")
	if r := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 1.5, Limit: 100}); r.Total != 0 {
		t.Errorf("after losing its location: got %v, want nothing", ids(r))
	}
}

func (s *suite) nearPages(t *testing.T) {
	idx := s.withGeo(t)
	r := mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 5, Limit: 2, Offset: 2})
	wantIDs(t, "offset 2 limit 2", r, "g-3km", "g-4km")
	if r.Total != 6 {
		t.Errorf("Total = %d, want 6", r.Total)
	}
	r = mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 5, Limit: 2, Offset: 10})
	if len(r.Hits) != 0 || r.Total != 6 {
		t.Errorf("past the end: got %v (Total %d), want no hits and Total 6", ids(r), r.Total)
	}
}

func (s *suite) rebuildReplaces(t *testing.T) {
	ctx := context.Background()
	idx := s.withList(t)
	mustUpsert(t, idx, []placeindex.Doc{{PlaceID: "old-only", Name: "Old Only", Category: "food", Location: &center}}, nil, "c2")
	fresh := placeindex.Doc{PlaceID: "new-only", Name: "New Only", Category: "food", Description: "Bourbon", Location: offset(center, 1, 0), RatingCount: 3}
	err := idx.Rebuild(ctx, func(w placeindex.Writer) error {
		if err := w.Upsert(ctx, listFixtures()[:2], nil, "r1"); err != nil {
			return err
		}
		return w.Upsert(ctx, []placeindex.Doc{fresh}, nil, "r2")
	})
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	wantIDs(t, "list after rebuild", mustList(t, idx, placeindex.ListQuery{Limit: 100}), "p-buffalo", "p-woodford", "new-only")
	wantIDs(t, "near after rebuild", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 5, Limit: 100}), "new-only")
	wantSameIDs(t, "q after rebuild", mustList(t, idx, placeindex.ListQuery{Q: "bourbon", Limit: 100}), "p-buffalo", "p-woodford", "new-only")
	if cp, err := idx.Checkpoint(ctx); err != nil || cp != "r2" {
		t.Errorf("Checkpoint() = %q, %v; want r2", cp, err)
	}
	// The rebuilt generation takes upserts like the first one did.
	mustUpsert(t, idx, []placeindex.Doc{{PlaceID: "after", Name: "After", Category: "food", RatingCount: 1000}}, []string{"p-buffalo"}, "c3")
	wantIDs(t, "upsert after rebuild", mustList(t, idx, placeindex.ListQuery{Limit: 100}), "after", "p-woodford", "new-only")
	if cp, err := idx.Checkpoint(ctx); err != nil || cp != "c3" {
		t.Errorf("Checkpoint() = %q, %v; want c3", cp, err)
	}
}

func (s *suite) rebuildIsolatesReaders(t *testing.T) {
	ctx := context.Background()
	idx := s.open(t)
	mustUpsert(t, idx, []placeindex.Doc{{PlaceID: "old", Name: "Old", Category: "food", Location: &center}}, nil, "c1")
	err := idx.Rebuild(ctx, func(w placeindex.Writer) error {
		if err := w.Upsert(ctx, []placeindex.Doc{{PlaceID: "new", Name: "New", Category: "food", Location: &center}}, nil, "r1"); err != nil {
			return err
		}
		wantIDs(t, "list during fill", mustList(t, idx, placeindex.ListQuery{Limit: 100}), "old")
		wantIDs(t, "q during fill", mustList(t, idx, placeindex.ListQuery{Q: "new", Limit: 100}))
		wantIDs(t, "near during fill", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 1, Limit: 100}), "old")
		if cp, err := idx.Checkpoint(ctx); err != nil || cp != "c1" {
			t.Errorf("Checkpoint() during fill = %q, %v; want c1", cp, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	wantIDs(t, "list after swap", mustList(t, idx, placeindex.ListQuery{Limit: 100}), "new")
	wantIDs(t, "near after swap", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 1, Limit: 100}), "new")
}

func (s *suite) rebuildFailureKeepsOld(t *testing.T) {
	ctx := context.Background()
	idx := s.open(t)
	mustUpsert(t, idx, []placeindex.Doc{{PlaceID: "old", Name: "Old", Category: "food", Location: &center}}, nil, "c1")
	boom := errors.New("replay failed")
	err := idx.Rebuild(ctx, func(w placeindex.Writer) error {
		if err := w.Upsert(ctx, []placeindex.Doc{{PlaceID: "new", Name: "New", Category: "food"}}, nil, "r1"); err != nil {
			return err
		}
		return fmt.Errorf("filling: %w", boom)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Rebuild error = %v, want it to wrap %v", err, boom)
	}
	wantIDs(t, "list after failed rebuild", mustList(t, idx, placeindex.ListQuery{Limit: 100}), "old")
	wantIDs(t, "near after failed rebuild", mustNear(t, idx, placeindex.GeoQuery{Center: center, RadiusKm: 1, Limit: 100}), "old")
	if cp, err := idx.Checkpoint(ctx); err != nil || cp != "c1" {
		t.Errorf("Checkpoint() = %q, %v; want c1", cp, err)
	}
	// The index still rebuilds after a failure.
	err = idx.Rebuild(ctx, func(w placeindex.Writer) error {
		return w.Upsert(ctx, []placeindex.Doc{{PlaceID: "new", Name: "New", Category: "food"}}, nil, "r2")
	})
	if err != nil {
		t.Fatalf("second Rebuild: %v", err)
	}
	wantIDs(t, "list after second rebuild", mustList(t, idx, placeindex.ListQuery{Limit: 100}), "new")
}
