package elasticindex_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex/elasticindex"
)

// The checkpoint index is gone (deleted by hand, a snapshot restore of the places only):
// Checkpoint fails, rather than claim an empty index and have the projection replay the whole
// store into the live generation (found by review). A fake cluster, as above.
func TestAMissingCheckpointIndexIsAnErrorNotAnEmptyIndex(t *testing.T) {
	var gone atomic.Bool // after Open, which finds it there
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("X-Elastic-Product", "Elasticsearch")
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodHead && r.URL.Path == "/places-checkpoint" && gone.Load():
			w.WriteHeader(http.StatusNotFound) // the index is gone
		case r.Method == http.MethodHead:
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/_alias/places":
			io.WriteString(w, `{"places-3":{"aliases":{"places":{}}}}`)
		case strings.HasPrefix(r.URL.Path, "/places-checkpoint/_doc/"):
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"root_cause":[{"type":"index_not_found_exception","reason":"no such index [places-checkpoint]"}],"type":"index_not_found_exception","reason":"no such index [places-checkpoint]","index":"places-checkpoint"},"status":404}`)
		}
	}))
	defer srv.Close()
	x, err := elasticindex.Open(context.Background(), srv.URL, "places")
	if err != nil {
		t.Fatal(err)
	}
	gone.Store(true)
	cp, err := x.Checkpoint(context.Background())
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing checkpoint index read as checkpoint %q", cp)
	}
}
