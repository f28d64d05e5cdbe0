package elasticindex_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/elasticindex"
)

// fakeES records the requests the adapter sends and answers each with a
// canned body. It checks what the adapter asks for, not what Elasticsearch
// does with it; the contract suite covers that against a real server.
type fakeES struct {
	mu       sync.Mutex
	requests []string          // "METHOD /path"
	bodies   map[string]string // last body per "METHOD /path"
	queries  map[string]string // last query string per "METHOD /path"
	bulks    []string          // every bulk body, in order
	// hits, when set, is the "hits" array every search answers (else one hit, p-near).
	hits string
}

func (f *fakeES) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Method + " " + r.URL.Path
	f.mu.Lock()
	f.requests = append(f.requests, key)
	f.bodies[key] = string(body)
	f.queries[key] = r.URL.RawQuery
	if strings.HasSuffix(r.URL.Path, "/_bulk") {
		f.bulks = append(f.bulks, string(body))
	}
	f.mu.Unlock()

	w.Header().Set("X-Elastic-Product", "Elasticsearch")
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodHead:
		w.WriteHeader(http.StatusOK)
	case key == "GET /_alias/places":
		io.WriteString(w, `{"places-3":{"aliases":{"places":{}}}}`)
	case strings.HasSuffix(r.URL.Path, "/_search") && f.hits != "":
		io.WriteString(w, `{"took":1,"timed_out":false,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0},
			"hits":{"total":{"value":4,"relation":"eq"},"hits":`+f.hits+`}}`)
	case strings.HasSuffix(r.URL.Path, "/_search"):
		io.WriteString(w, `{"took":1,"timed_out":false,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0},
			"hits":{"total":{"value":42,"relation":"eq"},"hits":[
			{"_index":"places-3","_id":"p-near","_score":null,"_source":{"location":{"lat":38.05,"lon":-84.5}},"sort":[1.0766,"p-near"]}]}}`)
	case strings.HasSuffix(r.URL.Path, "/_bulk"):
		io.WriteString(w, `{"took":1,"errors":false,"items":[]}`)
	case strings.HasPrefix(r.URL.Path, "/places-checkpoint/_doc/"):
		io.WriteString(w, `{"_index":"places-checkpoint","_id":"x","_version":1,"result":"created","_seq_no":0,"_primary_term":1,"_shards":{"total":1,"successful":1,"failed":0}}`)
	case strings.HasSuffix(r.URL.Path, "/_refresh"):
		io.WriteString(w, `{"_shards":{"total":1,"successful":1,"failed":0}}`)
	default:
		io.WriteString(w, `{"acknowledged":true,"shards_acknowledged":true,"index":"x"}`)
	}
}

func openFake(t *testing.T) (*elasticindex.Index, *fakeES) {
	t.Helper()
	f := &fakeES{bodies: map[string]string{}, queries: map[string]string{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	idx, err := elasticindex.Open(context.Background(), srv.URL, "places")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	f.requests = nil
	return idx, f
}

func TestNearAsksForAnArcDistanceFilterAndSortInKilometres(t *testing.T) {
	idx, f := openFake(t)
	center := placeindex.GeoPoint{Lat: 38.0406, Lng: -84.5037}
	res, err := idx.Near(context.Background(), placeindex.GeoQuery{Center: center, RadiusKm: 5, CategoryPrefix: "food", ExcludeID: "p-self", Limit: 10, Offset: 20})
	if err != nil {
		t.Fatalf("Near: %v", err)
	}
	var body struct {
		Query struct {
			Bool struct {
				Filter  []map[string]json.RawMessage
				MustNot []map[string]json.RawMessage `json:"must_not"`
			}
		}
		Sort           []map[string]json.RawMessage
		From, Size     int
		TrackTotalHits bool `json:"track_total_hits"`
	}
	raw := f.bodies["POST /places/_search"]
	if err := json.Unmarshal([]byte(raw), &body); err != nil {
		t.Fatalf("search body %q: %v", raw, err)
	}
	for _, want := range []string{`"distance":"5km"`, `"distance_type":"arc"`, `"location":{"lat":38.0406,"lon":-84.5037}`, `"unit":"km"`,
		`{"term":{"category":{"value":"food"}}}`, `{"prefix":{"category":{"value":"food."}}}`, `{"ids":{"values":["p-self"]}}`} {
		if !strings.Contains(raw, want) {
			t.Errorf("search body lacks %s:\n%s", want, raw)
		}
	}
	if len(body.Sort) != 2 || body.Sort[0]["_geo_distance"] == nil || body.Sort[1]["place_id"] == nil {
		t.Errorf("sort = %s, want _geo_distance then place_id", raw)
	}
	if body.From != 20 || body.Size != 10 || !body.TrackTotalHits {
		t.Errorf("from/size/track_total_hits = %d/%d/%v, want 20/10/true", body.From, body.Size, body.TrackTotalHits)
	}
	want := placeindex.DistanceKm(center, placeindex.GeoPoint{Lat: 38.05, Lng: -84.5})
	if res.Total != 42 || len(res.Hits) != 1 || res.Hits[0].PlaceID != "p-near" || math.Abs(res.Hits[0].DistanceKm-want) > 1e-9 {
		t.Errorf("result = %+v, want p-near at %v km of 42", res, want)
	}
}

// Elasticsearch sorts by the distance of the point it stores (to about a centimetre), the
// adapter reports the exact distance of the stored coordinates: a page's rows come in the
// order of the distance_km they report, ties by place_id (docs/api.md, "Geo search").
func TestNearOrdersAPageByTheDistanceItReports(t *testing.T) {
	idx, f := openFake(t)
	center := placeindex.GeoPoint{Lat: 38, Lng: -84.5}
	// In Elasticsearch's order: p-far's stored point is nearer than p-near's, though its exact
	// coordinates are 4 mm farther; p-twin-b and p-twin-a stand on the same spot.
	f.hits = `[
		{"_index":"places-3","_id":"p-far","_source":{"location":{"lat":38.01000004,"lon":-84.5}},"sort":[1.111949,"p-far"]},
		{"_index":"places-3","_id":"p-near","_source":{"location":{"lat":38.01,"lon":-84.5}},"sort":[1.111950,"p-near"]},
		{"_index":"places-3","_id":"p-twin-b","_source":{"location":{"lat":38.02,"lon":-84.5}},"sort":[2.2239,"p-twin-b"]},
		{"_index":"places-3","_id":"p-twin-a","_source":{"location":{"lat":38.02,"lon":-84.5}},"sort":[2.2239,"p-twin-a"]}]`
	res, err := idx.Near(context.Background(), placeindex.GeoQuery{Center: center, RadiusKm: 5})
	if err != nil {
		t.Fatalf("Near: %v", err)
	}
	var got []string
	for _, h := range res.Hits {
		got = append(got, h.PlaceID)
	}
	if want := []string{"p-near", "p-far", "p-twin-a", "p-twin-b"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("page = %v (%+v), want %v: ordered by the distance_km reported, then place_id", got, res.Hits, want)
	}
	for i := 1; i < len(res.Hits); i++ {
		if a, b := res.Hits[i-1], res.Hits[i]; a.DistanceKm > b.DistanceKm {
			t.Errorf("%s at %v km comes before %s at %v km", a.PlaceID, a.DistanceKm, b.PlaceID, b.DistanceKm)
		}
	}
}

func TestListWithQAsksForEveryWordAsAPrefixAndSortsByScore(t *testing.T) {
	idx, f := openFake(t)
	if _, err := idx.List(context.Background(), placeindex.ListQuery{Q: "Bourb tasting", TownPrefix: "lex", Limit: 20}); err != nil {
		t.Fatalf("List: %v", err)
	}
	raw := f.bodies["POST /places/_search"]
	for _, want := range []string{`"name.grams":{"boost":3,"operator":"and","query":"bourb"}`, `"description.grams":{"boost":1,"operator":"and","query":"tasting"}`,
		`"filter":[{"prefix":{"town_slug":{"value":"lex"}}}]`, `{"_score":{"order":"desc"}}`, `{"place_id":{"order":"asc"}}`, `"_source":false`} {
		if !strings.Contains(raw, want) {
			t.Errorf("search body lacks %s:\n%s", want, raw)
		}
	}
}

// A versioned document is indexed with its stream version as an external version, so
// Elasticsearch keeps the newer of two versions whatever order they arrive in.
func TestUpsertIndexesWithTheStreamVersionAsAnExternalVersion(t *testing.T) {
	idx, f := openFake(t)
	ctx := context.Background()
	docs := []placeindex.Doc{{PlaceID: "p1", Name: "One", Category: "food", Version: 7}, {PlaceID: "p2", Name: "Two", Category: "food"}}
	if err := idx.Upsert(ctx, docs, nil, "cp-1"); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	bulk := f.bodies["POST /places/_bulk"]
	for _, want := range []string{`{"index":{"_id":"p1","version":7,"version_type":"external_gte"}}`, `{"index":{"_id":"p2"}}`} {
		if !strings.Contains(bulk, want) {
			t.Errorf("bulk body lacks %s:\n%s", want, bulk)
		}
	}
}

// docs/api.md, "Places": a place whose name holds more of the words of q ranks above one whose
// name holds fewer, then by the text score, as in the embedded index. The text query's score is
// squashed into [0, 1) by a script and every word of q adds 1 when the name holds it; the words
// count once per folded form, and a word longer than the n-grams is looked up by its first 20
// folded characters, as bleveindex's nameQuery does.
func TestListWithQCountsTheWordsOfQTheNameHoldsAboveTheTextScore(t *testing.T) {
	idx, f := openFake(t)
	q := "Bourb café CAFE cafe Æstheticallysupercalifragilistic a⑽bcdefghijklmnopqrstuvwxyz"
	if _, err := idx.List(context.Background(), placeindex.ListQuery{Q: q, TownPrefix: "lex", Limit: 20}); err != nil {
		t.Fatalf("List: %v", err)
	}
	raw := f.bodies["POST /places/_search"]
	var body struct {
		Query struct {
			Bool struct {
				Filter []json.RawMessage
				Must   []struct {
					ScriptScore *struct {
						Query struct {
							Bool struct{ Must []json.RawMessage }
						}
						Script struct{ Source string }
					} `json:"script_score"`
				}
				Should []struct {
					ConstantScore *struct {
						Filter json.RawMessage
						Boost  float64
					} `json:"constant_score"`
				}
				MinimumShouldMatch *int `json:"minimum_should_match"`
			}
		}
		Sort []map[string]json.RawMessage
	}
	if err := json.Unmarshal([]byte(raw), &body); err != nil {
		t.Fatalf("search body %q: %v", raw, err)
	}
	b := body.Query.Bool
	// The text query: every distinct word of q must match, scored s/(1+s).
	if len(b.Must) != 1 || b.Must[0].ScriptScore == nil {
		t.Fatalf("must = %s, want one script_score:\n%s", raw, raw)
	}
	ss := b.Must[0].ScriptScore
	if ss.Script.Source != "_score / (1 + _score)" {
		t.Errorf("script %q, want _score / (1 + _score)", ss.Script.Source)
	}
	if words := placeindex.DistinctWords(q); len(ss.Query.Bool.Must) != len(words) {
		t.Errorf("script_score's query holds %d must clauses, want one per distinct word %v:\n%s", len(ss.Query.Bool.Must), words, raw)
	}
	for _, w := range []string{`"name.grams":{"boost":3,"operator":"and","query":"bourb"}`, `"description.grams":{"boost":1,"operator":"and","query":"café"}`} {
		if !strings.Contains(raw, w) {
			t.Errorf("search body lacks the text clause %s:\n%s", w, raw)
		}
	}
	// The should clauses only add to the score: the must and the filter choose the places.
	if b.MinimumShouldMatch == nil || *b.MinimumShouldMatch != 0 {
		t.Errorf("minimum_should_match = %v, want 0:\n%s", b.MinimumShouldMatch, raw)
	}
	if len(b.Filter) != 1 || string(b.Filter[0]) != `{"prefix":{"town_slug":{"value":"lex"}}}` {
		t.Errorf("filter = %s, want the town prefix alone", b.Filter)
	}
	// One clause of 1 per word of q the name may hold: café, CAFE and cafe are one.
	want := []string{
		`{"match":{"name.grams":{"operator":"and","query":"bourb"}}}`,
		`{"match":{"name.grams":{"operator":"and","query":"café"}}}`,
		// Longer than the n-grams: its first 20 characters once folded (Æ is AE).
		`{"match":{"name.grams":{"operator":"and","query":"aestheticallysuperca"}}}`,
		// Folds into several words, which cannot be cut: a prefix of a whole word of the name.
		`{"bool":{"minimum_should_match":1,"should":[{"match":{"name.grams":{"operator":"and","query":"a⑽bcdefghijklmnopqrstuvwxyz"}}},` +
			`{"match_bool_prefix":{"name":{"operator":"and","query":"a⑽bcdefghijklmnopqrstuvwxyz"}}}]}}`,
	}
	if len(b.Should) != len(want) {
		t.Fatalf("%d should clauses, want %d:\n%s", len(b.Should), len(want), raw)
	}
	for i, s := range b.Should {
		if s.ConstantScore == nil || s.ConstantScore.Boost != 1 || string(s.ConstantScore.Filter) != want[i] {
			t.Errorf("should[%d] = %+v, want constant_score 1 of %s:\n%s", i, s.ConstantScore, want[i], raw)
		}
	}
	if len(body.Sort) != 2 || body.Sort[0]["_score"] == nil || body.Sort[1]["place_id"] == nil {
		t.Errorf("sort = %s, want _score then place_id", raw)
	}

	// Without q, nothing is scored.
	if _, err := idx.List(context.Background(), placeindex.ListQuery{TownPrefix: "lex", Limit: 20}); err != nil {
		t.Fatalf("List: %v", err)
	}
	raw = f.bodies["POST /places/_search"]
	for _, no := range []string{"script_score", "constant_score", "should"} {
		if strings.Contains(raw, no) {
			t.Errorf("list without q asks for %s:\n%s", no, raw)
		}
	}
}

// Every copy of the shard (the primary and its replicas) scores by its own term statistics,
// which count a replaced place's old document until that copy merges it away, and copies merge
// on their own: by default each search goes to whichever copy Elasticsearch picks, so two
// pages of one q could be ranked by different copies and repeat or skip places (each row
// charged). docs/api.md, "Places": offset pages through the same order as limit. Every page of
// one q asks for the same copies (a custom preference, which must not start with "_"), whatever
// its offset and limit.
func TestEveryPageOfOneQIsAskedOfTheSameShardCopies(t *testing.T) {
	idx, f := openFake(t)
	preference := func(q placeindex.ListQuery) string {
		t.Helper()
		if _, err := idx.List(context.Background(), q); err != nil {
			t.Fatalf("List: %v", err)
		}
		v, err := url.ParseQuery(f.queries["POST /places/_search"])
		if err != nil {
			t.Fatalf("search query string: %v", err)
		}
		return v.Get("preference")
	}
	first := preference(placeindex.ListQuery{Q: "Bourbon bar", TownPrefix: "lex", Limit: 20})
	if first == "" || strings.HasPrefix(first, "_") {
		t.Fatalf("search preference = %q, want a custom string (not starting with _)", first)
	}
	for _, page := range []placeindex.ListQuery{
		{Q: "Bourbon bar", TownPrefix: "lex", Limit: 20, Offset: 20},
		{Q: "bourbon  BAR", TownPrefix: "lex", Limit: 100, Offset: 40},
	} {
		if got := preference(page); got != first {
			t.Errorf("%+v: preference %q, want %q as on the first page", page, got, first)
		}
	}
}
