package elasticindex_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
)

// http.max_content_length, Elasticsearch's default limit on a request body (100mb).
const esMaxContentLength = 100 << 20

// One import the catalog accepts (18 lines under the 1 MiB line limit, 18 MiB under the
// 64 MiB body limit) would be one bulk body over http.max_content_length (Go's json.Marshal
// writes '<' as \u003c, 6 bytes): the batch is sent in several requests, each under it.
func TestABatchTooLargeForOneBulkRequestIsSentInSeveral(t *testing.T) {
	var ndjson strings.Builder
	for i := range 18 {
		fmt.Fprintf(&ndjson, `{"record":"place","place_id":"p%02d","name":"Big %d","category":"food","description":%q}`+"\n",
			i, i, strings.Repeat("<", 1_000_000))
	}
	if ndjson.Len() > 64<<20 {
		t.Fatalf("import body %d bytes is over the 64 MiB limit", ndjson.Len())
	}
	cat, err := domain.ParseCatalog(strings.NewReader(ndjson.String()))
	if err != nil {
		t.Fatalf("the catalog refuses the import: %v", err)
	}
	var docs []placeindex.Doc
	for _, p := range cat.Places {
		docs = append(docs, projections.PlaceDoc(p))
	}
	if len(docs) != 18 {
		t.Fatalf("%d docs", len(docs))
	}
	idx, f := openFake(t)
	if err := idx.Upsert(context.Background(), docs, nil, "cp-1"); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	sent := 0
	for _, b := range f.bulks {
		if len(b) > esMaxContentLength {
			t.Errorf("a bulk body of %d bytes > http.max_content_length %d: Elasticsearch answers 413 and the batch is retried for ever", len(b), esMaxContentLength)
		}
		sent += strings.Count(b, `{"index":{`)
	}
	if sent != len(docs) || len(f.bulks) < 2 {
		t.Errorf("%d documents sent in %d bulk requests, want all %d in several", sent, len(f.bulks), len(docs))
	}
}

// An item rejected with 429 es_rejected_execution_exception (a full write queue, indexing
// pressure; Elasticsearch asks for it to be retried with a backoff) is sent again, instead of
// failing the whole Rebuild, which then deleted everything it had filled.
func TestAnItemRejectedForLoadIsSentAgainNotFailingTheRebuild(t *testing.T) {
	f := liveAt3()
	rejected := false
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !rejected && strings.HasSuffix(r.URL.Path, "-fill/_bulk") {
			rejected = true
			io.ReadAll(r.Body)
			w.Header().Set("X-Elastic-Product", "Elasticsearch")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"took":1,"errors":true,"items":[{"index":{"_index":"places-4","_id":"p1","status":201,"result":"created"}},`+
				`{"index":{"_index":"places-4","_id":"p2","status":429,"error":{"type":"es_rejected_execution_exception","reason":"rejected execution of coordinating operation"}}}]}`)
			return
		}
		f.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	idx := f.open(t, srv.URL)
	batches := 0
	err := idx.Rebuild(context.Background(), func(w placeindex.Writer) error {
		for b := range 3 {
			batches++
			docs := []placeindex.Doc{{PlaceID: "p1", Name: "One", Category: "food", Version: 1}, {PlaceID: "p2", Name: "Two", Category: "food", Version: 1}}
			if err := w.Upsert(context.Background(), docs, nil, fmt.Sprintf("cp-%d", b)); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("Rebuild: %v (after %d batches); alias on %q; indexes %v", err, batches, f.aliasTarget("places"), f.indexNames())
	if err != nil {
		t.Errorf("one transient 429 item failed the whole rebuild: %v", err)
	}
}

// Folding turns ⑽ (3 bytes) into "(10)" (4 characters): a word of 18 bytes folds to 24
// characters, past every edge n-gram (max_gram 20), and needs the match_bool_prefix fallback
// to prefix any word on Elasticsearch, as the embedded index finds the place.
func TestAWordThatOutgrowsTheGramsOnceFoldedGetsThePrefixFallback(t *testing.T) {
	q := strings.Repeat("⑽", 6)
	idx, f := openFake(t)
	if _, err := idx.List(context.Background(), placeindex.ListQuery{Q: q}); err != nil {
		t.Fatalf("List: %v", err)
	}
	body := f.bodies["POST /places/_search"]
	b, err := bleveindex.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.Upsert(ctx, []placeindex.Doc{{PlaceID: "p1", Name: strings.Repeat("⑽", 7), Category: "food"}}, nil, "cp"); err != nil {
		t.Fatal(err)
	}
	res, err := b.List(ctx, placeindex.ListQuery{Q: q})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("len(q)=%d bytes; embedded hits %v; ES body has match_bool_prefix: %v", len(q), res.Hits, strings.Contains(body, "match_bool_prefix"))
	if !strings.Contains(body, "match_bool_prefix") {
		t.Errorf("no prefix fallback for a word that folds to 24 characters (> max_gram 20):\n%s", body)
	}
}
