package projections_test

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// Re-imports that rename places (making and unmaking chains), move them between towns and
// drop their towns, applied incrementally in small ranges, end exactly where a rebuild does:
// rm_places and the place index (lists by town and by word, geo search).
func TestCatalogAndIndexCaughtUpInSmallStepsEqualARebuildAcrossReimports(t *testing.T) {
	pool := poolWithRoom(t)
	clock := func() time.Time { return catalogNow }
	cat := projections.SQL{Pool: pool, Applier: projections.Catalog{Clock: clock}}
	inc := projections.PlaceIndex{Pool: pool, Index: newIndex(t)}
	rng := rand.New(rand.NewSource(7))
	names := []string{"Joe's Diner", "Ann's Pies", "Bluegrass Grill", "Mae's Diner"}
	towns := []string{"berea", "bardstown", "paducah", ""}
	openAccounts(t, pool, 0, 2)
	catalogImport(t, pool, []byte(`{"record":"town","slug":"berea","name":"Berea"}
{"record":"town","slug":"bardstown","name":"Bardstown"}
{"record":"town","slug":"paducah","name":"Paducah"}`))
	for round := 0; round < 6; round++ {
		var lines []string
		for i := 0; i < 8; i++ {
			if rng.Intn(3) == 0 && round > 0 {
				continue
			}
			town := towns[rng.Intn(len(towns))]
			ts := ""
			if town != "" {
				ts = fmt.Sprintf(`,"town_slug":%q`, town)
			}
			lines = append(lines, fmt.Sprintf(`{"record":"place","place_id":"p%d","name":%q,"category":"food.diner","latitude":%v,"longitude":%v,"rating_count":%d%s}`,
				i, names[rng.Intn(len(names))], 37.5+rng.Float64()/10, -84.3+rng.Float64()/10, rng.Intn(50), ts))
		}
		catalogImport(t, pool, []byte(strings.Join(lines, "\n")))
		openAccounts(t, pool, 10+round, 1)
		waitVisible(t, pool)
		if _, err := projections.CatchUp(bg, pool, cat, 2, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := projections.CatchUp(bg, pool, inc, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	incRows := catalogSnapshot(t, pool)
	incIdx := indexAnswers(t, inc.Index)

	if _, err := cat.Rebuild(bg, 1000, nil); err != nil {
		t.Fatal(err)
	}
	reb := projections.PlaceIndex{Pool: pool, Index: newIndex(t)}
	if _, err := reb.Rebuild(bg, 1000, nil); err != nil {
		t.Fatal(err)
	}
	if got := catalogSnapshot(t, pool); got != incRows {
		t.Errorf("rm_* after incremental catch-ups differ from a rebuild:\nincremental:\n%s\nrebuilt:\n%s", incRows, got)
	}
	if got := indexAnswers(t, reb.Index); !reflect.DeepEqual(got, incIdx) {
		t.Errorf("place index after incremental catch-ups differs from a rebuild:\nincremental: %v\nrebuilt:     %v", incIdx, got)
	}
	// And the index agrees with rm_places about towns.
	for _, town := range []string{"berea", "bardstown", "paducah"} {
		want := catalogCount(t, pool, `SELECT count(*) FROM rm_places WHERE town_slug = $1`, town)
		if got := incIdx["town="+town].Total; got != want {
			t.Errorf("town %s: index lists %d places, rm_places holds %d", town, got, want)
		}
	}
}

func indexAnswers(t *testing.T, idx placeindex.Index) map[string]placeindex.Result {
	t.Helper()
	out := map[string]placeindex.Result{}
	for _, town := range []string{"", "berea", "bardstown", "paducah", "b"} {
		r, err := idx.List(bg, placeindex.ListQuery{TownPrefix: town, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		out["town="+town] = r
		for _, q := range []string{"joe", "ann", "bluegrass", "mae", "diner"} {
			r, err := idx.List(bg, placeindex.ListQuery{TownPrefix: town, Q: q, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			out["town="+town+"&q="+q] = r
		}
	}
	r, err := idx.Near(bg, placeindex.GeoQuery{Center: placeindex.GeoPoint{Lat: 37.55, Lng: -84.25}, RadiusKm: 50, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	out["near"] = r
	return out
}
