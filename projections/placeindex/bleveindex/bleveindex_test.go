package bleveindex_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
	"github.com/kyapi/kyapi/projections/placeindex/placeindextest"
)

func open(t *testing.T, dir string) *bleveindex.Index {
	t.Helper()
	idx, err := bleveindex.Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { idx.Close() })
	return idx
}

func TestContract(t *testing.T) {
	placeindextest.Run(t,
		func(t *testing.T) placeindex.Index { return open(t, t.TempDir()) },
		placeindextest.WithReopen(func(t *testing.T, old placeindex.Index) placeindex.Index {
			idx := old.(*bleveindex.Index)
			if err := idx.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, idx.Dir())
		}),
	)
}

func TestNearFindsPlacesAcrossTheAntimeridianAndAtThePoles(t *testing.T) {
	ctx := context.Background()
	idx := open(t, t.TempDir())
	docs := []placeindex.Doc{
		{PlaceID: "east", Category: "x", Location: &placeindex.GeoPoint{Lat: 10, Lng: 179.99}},
		{PlaceID: "west", Category: "x", Location: &placeindex.GeoPoint{Lat: 10, Lng: -179.99}},
		{PlaceID: "pole", Category: "x", Location: &placeindex.GeoPoint{Lat: 89.99, Lng: 0}},
		{PlaceID: "pole-far-side", Category: "x", Location: &placeindex.GeoPoint{Lat: 89.99, Lng: 180}},
	}
	if err := idx.Upsert(ctx, docs, nil, "c1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		center placeindex.GeoPoint
		want   []string
	}{
		{placeindex.GeoPoint{Lat: 10, Lng: -179.995}, []string{"west", "east"}},
		{placeindex.GeoPoint{Lat: 10, Lng: 179.995}, []string{"east", "west"}},
		{placeindex.GeoPoint{Lat: 89.995, Lng: 90}, []string{"pole", "pole-far-side"}},
	} {
		res, err := idx.Near(ctx, placeindex.GeoQuery{Center: tc.center, RadiusKm: 5, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range res.Hits {
			got = append(got, h.PlaceID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("near %+v: got %v, want %v", tc.center, got, tc.want)
		}
	}
}

// One process at a time uses an index directory, from the moment it opens it: while another
// holds the directory's lock (here taken by the test, as another process would), Open of an
// empty directory waits, then answers ErrInUse and creates nothing — two processes starting
// together on an empty DATA_DIR would otherwise both create its first generation. After the
// other lets go, the directory opens.
func TestOpenOfADirectoryAnotherProcessHoldsCreatesNothingAndIsRefused(t *testing.T) {
	dir := t.TempDir()
	other, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if x, err := bleveindex.OpenWaiting(context.Background(), dir, 200*time.Millisecond); !errors.Is(err, bleveindex.ErrInUse) {
		if x != nil {
			x.Close()
		}
		t.Fatalf("Open of a directory another process holds: %v, want ErrInUse", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("the refused Open left %d entries in the directory, want only LOCK", len(entries))
	}
	other.Close() // lets go of the lock
	idx := open(t, dir)
	if err := idx.Upsert(context.Background(), []placeindex.Doc{{PlaceID: "p", Category: "x"}}, nil, "cp-1"); err != nil {
		t.Fatal(err)
	}
}

// A rebuild writes each range as several bleve batches at once (one per core). Every place
// goes to one of them whatever its position, so a place twice in a range keeps its last
// document, an older version than the index holds is still left out, deletes apply after the
// documents, and the checkpoint is the last range's.
func TestARebuildWrittenInSeveralBatchesAtOnceKeepsTheLastOfEachPlace(t *testing.T) {
	ctx := context.Background()
	idx := open(t, t.TempDir())
	doc := func(i int, name string, version int64) placeindex.Doc {
		return placeindex.Doc{PlaceID: fmt.Sprintf("p%03d", i), Name: name, Category: "diner", Version: version}
	}
	err := idx.Rebuild(ctx, func(w placeindex.Writer) error {
		var first []placeindex.Doc
		for i := range 600 {
			first = append(first, doc(i, "plain", 0))
		}
		first = append(first, doc(7, "juniper", 0), doc(10, "alpha", 5), doc(11, "older", 2))
		if err := w.Upsert(ctx, first, nil, "c1"); err != nil {
			return err
		}
		var second []placeindex.Doc
		for i := 300; i < 600; i++ {
			second = append(second, doc(i, "plain", 0))
		}
		second = append(second, doc(10, "bravo", 3), doc(11, "newer", 7))
		return w.Upsert(ctx, second, []string{"p020", "p310"}, "c2")
	})
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string][]string{"plain": nil, "juniper": {"p007"}, "alpha": {"p010"}, "bravo": {},
		"newer": {"p011"}, "older": {}} {
		res, err := idx.List(ctx, placeindex.ListQuery{Q: q, Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		if q == "plain" {
			// 600 places, less p007, p010 and p011 (renamed) and the two deleted.
			if res.Total != 595 {
				t.Errorf("%d places named plain, want 595", res.Total)
			}
			continue
		}
		var got []string
		for _, h := range res.Hits {
			got = append(got, h.PlaceID)
		}
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("q=%s: %v, want %v", q, got, want)
		}
	}
	if cp, err := idx.Checkpoint(ctx); err != nil || cp != "c2" {
		t.Errorf("checkpoint %q %v, want c2", cp, err)
	}
}

func hitIDs(r placeindex.Result) []string {
	out := []string{}
	for _, h := range r.Hits {
		out = append(out, h.PlaceID)
	}
	return out
}

// The words of q are placeindex.DistinctWords(q): what the read API counts against its limit
// of 16 and what the Elasticsearch adapter searches. bleve searches those words, each folded
// on its own, not q folded whole: folding first made other words ("⒜" is "(a)", a word of
// its own; "Ⓑ" is "B", a letter of the next word), so a q within the limit could search more
// words than it holds, and find what the other index does not.
func TestBleveSearchesTheWordsOfPlaceindexDistinctWords(t *testing.T) {
	ctx := context.Background()
	idx := open(t, t.TempDir())
	if err := idx.Upsert(ctx, []placeindex.Doc{
		{PlaceID: "xylo", Name: "Xylo Tavern", Category: "food.bar"},
		{PlaceID: "bourbon", Name: "Bourbon House", Category: "food.bar"},
		{PlaceID: "smallcaps", Name: "ᴄᴀꜰᴇ Rosa", Category: "food.cafe"},
	}, nil, "c1"); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string][]string{
		"x⒜":      {"xylo"},
		"xylo ⓩ":  {"xylo"},
		"Ⓑourbon": {},
		"xylo ⒜⒝⒞⒟⒠⒡⒢⒣⒤⒥⒦⒧⒨⒩⒪⒫⒬⒭⒮⒯⒰⒱⒲⒳⒴⒵": {"xylo"},
		// Each word is still folded and lower-cased as the index's words are.
		"Bourb": {"bourbon"},
		"ᴄᴀꜰ":   {"smallcaps"},
		"cafe":  {"smallcaps"},
	} {
		words := placeindex.DistinctWords(q)
		got, err := idx.List(ctx, placeindex.ListQuery{Q: q, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		asWords, err := idx.List(ctx, placeindex.ListQuery{Q: strings.Join(words, " "), Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(hitIDs(got), want) || !slices.Equal(hitIDs(asWords), want) {
			t.Errorf("q=%q (words %q): found %v, and %v for its words; want %v", q, words, hitIDs(got), hitIDs(asWords), want)
		}
	}
}

// docs/api.md, "Places": "Names weigh more than descriptions in the relevance order". A place
// whose name holds more of the words of q ranks above one whose name holds fewer, whatever its
// category and description say (a short description saying a word twice outscored a long name
// saying it once); among as many, the text score orders; pages keep that order.
func TestAPlaceWhoseNameHoldsMoreWordsOfQRanksFirst(t *testing.T) {
	ctx := context.Background()
	idx := open(t, t.TempDir())
	docs := []placeindex.Doc{
		{PlaceID: "a-long-name", Name: "Old Kentucky Bourbon Barrel Tavern and Smokehouse Grill", Category: "food.bar",
			Description: "A tavern on Main Street serving smoked meats, local beer and live music on weekends."},
		{PlaceID: "b-desc", Name: "Zed Tap", Category: "food.bar", Description: "Bourbon tastings and bourbon flights. Bourbon!"},
		{PlaceID: "c-category", Name: "Zed Spirits", Category: "bourbon.bar", Description: "Bourbon."},
		{PlaceID: "d-both", Name: "Bourbon Tavern", Category: "food.bar", Description: "Tavern."},
		{PlaceID: "e-tavern-name", Name: "Tavern on the Square", Category: "food.bar", Description: "Bourbon bourbon bourbon."},
		{PlaceID: "f-long-word", Name: "Supercalifragilisticexpialidocious Sweets and Treats of Old Kentucky", Category: "food.dessert"},
		{PlaceID: "g-long-word-desc", Name: "Zed Sweets", Category: "food.dessert", Description: "Supercalifragilisticexpialidocious supercalifragilisticexpialidocious."},
	}
	for i := range 30 {
		docs = append(docs, placeindex.Doc{PlaceID: fmt.Sprintf("other-%02d", i), Name: "Corner Cafe", Category: "food.cafe", Description: "Coffee."})
	}
	if err := idx.Upsert(ctx, docs, nil, "c1"); err != nil {
		t.Fatal(err)
	}
	list := func(q string, limit, offset int) placeindex.Result {
		t.Helper()
		r, err := idx.List(ctx, placeindex.ListQuery{Q: q, Limit: limit, Offset: offset})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Each q's matches in tiers: the places of a tier rank above those of the next, in an
	// order of their own (the text score's).
	for _, c := range []struct {
		q     string
		tiers [][]string
	}{
		{"bourbon", [][]string{{"a-long-name", "d-both"}, {"b-desc", "c-category", "e-tavern-name"}}},
		{"bourb", [][]string{{"a-long-name", "d-both"}, {"b-desc", "c-category", "e-tavern-name"}}},
		// Both words in the name; then one of them, whichever.
		{"bourbon tavern", [][]string{{"d-both"}, {"a-long-name", "e-tavern-name"}}},
		// A word longer than the n-grams, whole and as a prefix.
		{"supercalifragilisticexpialidocious", [][]string{{"f-long-word"}, {"g-long-word-desc"}}},
		{"supercalifragilisticexp", [][]string{{"f-long-word"}, {"g-long-word-desc"}}},
	} {
		got := hitIDs(list(c.q, 100, 0))
		rest := got
		for _, tier := range c.tiers {
			if len(rest) < len(tier) || !slices.Equal(slices.Sorted(slices.Values(rest[:len(tier)])), tier) {
				t.Fatalf("q=%q: %v, want the tiers %v", c.q, got, c.tiers)
			}
			rest = rest[len(tier):]
		}
		if len(rest) > 0 {
			t.Fatalf("q=%q: %v, want the tiers %v", c.q, got, c.tiers)
		}
		var paged []string
		for offset := 0; offset < len(got); offset += 2 {
			page := list(c.q, 2, offset)
			if page.Total != len(got) {
				t.Errorf("q=%q offset %d: Total %d, want %d", c.q, offset, page.Total, len(got))
			}
			paged = append(paged, hitIDs(page)...)
		}
		if !slices.Equal(paged, got) {
			t.Errorf("q=%q: pages of 2 give %v, one page %v", c.q, paged, got)
		}
	}
}
