package elasticindex

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// docs/operations.md: a request refused for load is "sent again up to three times, after 200,
// 400 and 800 ms". Those are the only pauses: none after the last attempt, when nothing is sent
// again and the read request only waits longer for its 503.
func TestASearchRefusedForLoadPausesOnlyBeforeEachOfItsThreeRetries(t *testing.T) {
	var searches atomic.Int32
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
			searches.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"root_cause":[],"type":"es_rejected_execution_exception","reason":"rejected execution"},"status":503}`)
		}
	}))
	defer srv.Close()
	var mu sync.Mutex
	var pauses []time.Duration
	defer func(was func(int) time.Duration) { retryBackoff = was }(retryBackoff)
	documented := retryBackoff
	retryBackoff = func(attempt int) time.Duration { // records the pause, and takes none
		mu.Lock()
		defer mu.Unlock()
		pauses = append(pauses, documented(attempt))
		return 0
	}
	x, err := Open(context.Background(), srv.URL, "places")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := x.List(context.Background(), placeindex.ListQuery{}); err == nil {
		t.Fatal("List against a cluster answering 503 succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	if n := searches.Load(); n != 4 || !slices.Equal(pauses, want) {
		t.Errorf("a search refused for load: sent %d times with pauses %v; want 4 times (three retries) with pauses %v", n, pauses, want)
	}
}
