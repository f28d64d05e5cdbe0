package bleveindex_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
)

const benchPlaces = 150_000

var (
	benchOnce sync.Once
	benchDir  string
	benchIdx  *bleveindex.Index
	benchErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if benchIdx != nil {
		benchIdx.Close()
	}
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

var (
	benchWords = []string{"bourbon", "barrel", "smokehouse", "tavern", "kitchen", "bluegrass", "derby", "horse",
		"river", "creek", "hollow", "market", "coffee", "bakery", "diner", "grill", "brewing", "country", "heritage",
		"farm", "orchard", "pizza", "tacos", "catfish", "burgoo", "hot", "brown", "fried", "chicken", "biscuit"}
	benchCategories = []string{"food.restaurant", "food.restaurant.bbq", "food.cafe", "food.bar", "attraction.distillery",
		"attraction.museum", "shopping.market", "lodging.inn", "outdoors.park", "services.auto"}
	benchTowns = []string{"louisville", "lexington", "bowling-green", "owensboro", "covington", "frankfort",
		"paducah", "richmond", "georgetown", "florence", "elizabethtown", "hopkinsville", "bardstown", "berea"}
)

func benchDocs() []placeindex.Doc {
	r := rand.New(rand.NewPCG(1, 2))
	word := func() string { return benchWords[r.IntN(len(benchWords))] }
	docs := make([]placeindex.Doc, benchPlaces)
	for i := range docs {
		w1, w2 := word(), word()
		docs[i] = placeindex.Doc{
			PlaceID:     fmt.Sprintf("pl_%07d", i),
			Name:        strings.ToUpper(w1[:1]) + w1[1:] + " " + w2 + " " + strconv.Itoa(i),
			Category:    benchCategories[r.IntN(len(benchCategories))],
			Description: strings.Join([]string{word(), word(), word(), word(), word(), word()}, " "),
			TownSlug:    benchTowns[r.IntN(len(benchTowns))],
			Location:    &placeindex.GeoPoint{Lat: 36.5 + r.Float64()*2.6, Lng: -89.5 + r.Float64()*7.5},
			RatingCount: r.IntN(2000),
		}
	}
	return docs
}

// benchIndex builds the 150,000-place index once per run, then reopens it so
// the benchmarks measure an index as a restarted process would see it.
func benchIndex(b *testing.B) *bleveindex.Index {
	benchOnce.Do(func() {
		benchDir, benchErr = os.MkdirTemp("", "placeindex-bench-")
		if benchErr != nil {
			return
		}
		dir := filepath.Join(benchDir, "placeindex")
		var idx *bleveindex.Index
		if idx, benchErr = bleveindex.Open(dir); benchErr != nil {
			return
		}
		start := time.Now()
		docs := benchDocs()
		for i := 0; i < len(docs) && benchErr == nil; i += 5000 {
			benchErr = idx.Upsert(context.Background(), docs[i:min(i+5000, len(docs))], nil, strconv.Itoa(i))
		}
		if benchErr != nil {
			return
		}
		built := time.Since(start)
		if benchErr = idx.Close(); benchErr != nil {
			return
		}
		start = time.Now()
		benchIdx, benchErr = bleveindex.Open(dir)
		fmt.Printf("built %d places in %v, reopened in %v\n", len(docs), built.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	})
	if benchErr != nil {
		b.Fatalf("building benchmark index: %v", benchErr)
	}
	return benchIdx
}

// measure runs op b.N times and reports the median latency and the
// process's resident memory alongside the usual mean.
func measure(b *testing.B, op func(i int) (placeindex.Result, error)) {
	lat := make([]time.Duration, 0, b.N)
	hits := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := op(i)
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		hits += len(res.Hits)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
	if rss, ok := rssMB(); ok {
		b.ReportMetric(rss, "rss-MB")
	}
}

func rssMB() (float64, bool) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return float64(kb) / 1024, err == nil
		}
	}
	return 0, false
}

func BenchmarkNear150k(b *testing.B) {
	idx := benchIndex(b)
	r := rand.New(rand.NewPCG(3, 4))
	centers := make([]placeindex.GeoPoint, 1024)
	for i := range centers {
		centers[i] = placeindex.GeoPoint{Lat: 36.5 + r.Float64()*2.6, Lng: -89.5 + r.Float64()*7.5}
	}
	for _, radius := range []float64{5, 50} {
		b.Run(fmt.Sprintf("radius=%gkm", radius), func(b *testing.B) {
			measure(b, func(i int) (placeindex.Result, error) {
				return idx.Near(context.Background(), placeindex.GeoQuery{Center: centers[i%len(centers)], RadiusKm: radius, Limit: 20})
			})
		})
	}
}

func BenchmarkListQ150k(b *testing.B) {
	idx := benchIndex(b)
	queries := []placeindex.ListQuery{
		{Q: "bourb", Limit: 20},
		{Q: "smokehouse bbq", Limit: 20},
		{Q: "hot brown", TownPrefix: "lex", Limit: 20},
		{Q: "b", Limit: 20},
		{Q: "derby 1234", Limit: 20},
	}
	for _, q := range queries {
		b.Run(fmt.Sprintf("q=%s/town=%s", q.Q, q.TownPrefix), func(b *testing.B) {
			measure(b, func(int) (placeindex.Result, error) { return idx.List(context.Background(), q) })
		})
	}
}

func BenchmarkList150k(b *testing.B) {
	idx := benchIndex(b)
	for _, q := range []placeindex.ListQuery{{Limit: 20}, {TownPrefix: "lexington", Limit: 20}, {TownPrefix: "lexington", Limit: 20, Offset: 1000}} {
		b.Run(fmt.Sprintf("town=%s/offset=%d", q.TownPrefix, q.Offset), func(b *testing.B) {
			measure(b, func(int) (placeindex.Result, error) { return idx.List(context.Background(), q) })
		})
	}
}

// BenchmarkRebuild150k is the embedded index's part of `kyapi rebuild`: a new generation filled
// with 150,000 places in batches of 5,000 (the projection's rebuildBatch), then swapped in.
// make bench runs it with GOGC=400, as `kyapi rebuild` runs the index.
func BenchmarkRebuild150k(b *testing.B) {
	docs := benchDocs()
	dir := filepath.Join(b.TempDir(), "placeindex")
	idx, err := bleveindex.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer idx.Close()
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		err := idx.Rebuild(ctx, func(w placeindex.Writer) error {
			for i := 0; i < len(docs); i += 5000 {
				if err := w.Upsert(ctx, docs[i:min(i+5000, len(docs))], nil, strconv.Itoa(i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(len(docs)*b.N)/b.Elapsed().Seconds(), "places/s")
	if res, err := idx.List(ctx, placeindex.ListQuery{Q: "bourbon", Limit: 1}); err != nil || res.Total == 0 {
		b.Fatalf("the rebuilt index finds no bourbon: %v %+v", err, res)
	}
}
