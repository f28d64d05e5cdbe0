package elasticindex_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// A cluster that is up but cannot serve the index (red after a restart, search queue full,
// a gateway in front of it) answers with an error status. The client retries 429/502/503/504
// and then hands back that answer: the read API answers 503, nothing charged, as for a
// cluster it cannot reach (it answered 500; found by review).
func TestAClusterAnsweringAnErrorItMayRecoverFromIs503NothingCharged(t *testing.T) {
	for _, c := range []struct {
		status            int
		contentType, body string
	}{
		{503, "application/json", `{"error":{"root_cause":[],"type":"search_phase_execution_exception","reason":"all shards failed","phase":"query","grouped":true,"failed_shards":[]},"status":503}`},
		{429, "application/json", `{"error":{"root_cause":[],"type":"es_rejected_execution_exception","reason":"rejected execution"},"status":429}`},
		{502, "text/html", `<html><body>502 Bad Gateway</body></html>`},
	} {
		f := liveAt3()
		x := f.open(t, f.serve(t))
		f.mu.Lock()
		f.searchFails.status, f.searchFails.contentType, f.searchFails.body = c.status, c.contentType, c.body
		f.mu.Unlock()
		for name, search := range map[string]func() error{
			"list": func() error { _, err := x.List(context.Background(), placeindex.ListQuery{Q: "bourbon"}); return err },
			"near": func() error {
				_, err := x.Near(context.Background(), placeindex.GeoQuery{Center: placeindex.GeoPoint{Lat: 38, Lng: -84.5}, RadiusKm: 5})
				return err
			},
		} {
			if got := httpx.MapError(search()); got.Status != http.StatusServiceUnavailable || got.Outcome != httpx.OutcomeNone {
				t.Errorf("cluster answering %d, %s: read API %d outcome %q, want 503 none", c.status, name, got.Status, got.Outcome)
			}
		}
	}
}
