package elasticindex_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/elasticindex"
)

// A cluster that is up but cannot serve the index (red after a restart, search queue full,
// a gateway in front of it) answers with an error status. The client retries 429/502/503/504
// and then hands back that answer: the read API answers 503, nothing charged, as for a
// cluster it cannot reach (it answered 500; found by review). (A fake cluster: no
// Elasticsearch server runs on these machines, README.)
func TestAClusterAnsweringAnErrorItMayRecoverFromIs503NothingCharged(t *testing.T) {
	for _, c := range []struct {
		status int
		ctype  string
		body   string
	}{
		{503, "application/json", `{"error":{"root_cause":[],"type":"search_phase_execution_exception","reason":"all shards failed","phase":"query","grouped":true,"failed_shards":[]},"status":503}`},
		{429, "application/json", `{"error":{"root_cause":[],"type":"es_rejected_execution_exception","reason":"rejected execution"},"status":429}`},
		{502, "text/html", `<html><body>502 Bad Gateway</body></html>`},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			w.Header().Set("X-Elastic-Product", "Elasticsearch")
			w.Header().Set("Content-Type", "application/json")
			switch {
			case r.Method == http.MethodHead:
				w.WriteHeader(http.StatusOK)
			case r.URL.Path == "/_alias/places":
				io.WriteString(w, `{"places-3":{"aliases":{"places":{}}}}`)
			case strings.HasSuffix(r.URL.Path, "/_search"):
				w.Header().Set("Content-Type", c.ctype)
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			}
		}))
		x, err := elasticindex.Open(context.Background(), srv.URL, "places")
		if err != nil {
			t.Fatal(err)
		}
		_, err = x.List(context.Background(), placeindex.ListQuery{Q: "bourbon"})
		got := httpx.MapError(err)
		if got.Status != http.StatusServiceUnavailable || got.Outcome != httpx.OutcomeNone {
			t.Errorf("ES answering %d: read API status %d, want 503", c.status, got.Status)
		}
		srv.Close()
	}
}
