package elasticindex

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kyapi/kyapi/projections/placeindex"

	"github.com/kyapi/kyapi/internal/silenttest"
)

// A cluster that accepts connections and never answers ends Open with an error (serve then
// exits naming the place index), instead of holding it for ever.
func TestOpenEndsWhenTheClusterNeverAnswers(t *testing.T) {
	silent := silenttest.Addr(t)
	defer func(was time.Duration) { openTimeout = was }(openTimeout)
	openTimeout = 300 * time.Millisecond
	if _, err := Open(context.Background(), "http://"+silent, "places"); err == nil {
		t.Fatal("Open of a cluster that never answers succeeded")
	}
}

// The cluster answers Open, then stops answering searches. docs/operations.md promises 30 s
// (answerTimeout) for an answer's headers, "then the request fails": the client must not send
// a timed-out request again (by default it did, three more times, waiting 4 × answerTimeout).
func TestASearchTheClusterNeverAnswersIsSentOnce(t *testing.T) {
	var searches atomic.Int32
	stall := make(chan struct{})
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
			select {
			case <-stall:
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	defer close(stall)
	defer func(was time.Duration) { answerTimeout = was }(answerTimeout)
	answerTimeout = time.Second // Open's requests are answered at once, well within it on a loaded machine
	x, err := Open(context.Background(), srv.URL, "places")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	start := time.Now()
	_, err = x.List(context.Background(), placeindex.ListQuery{Q: "bourbon"})
	took := time.Since(start)
	t.Logf("List: %v after %v, %d search requests sent", err, took, searches.Load())
	if err == nil {
		t.Fatal("List succeeded")
	}
	// Sent once is what shows it was not sent again (the time it took would say so only on an
	// idle machine); it failed because it timed out, so not before answerTimeout.
	if n := searches.Load(); n != 1 || took < answerTimeout {
		t.Errorf("a search the cluster never answers was sent %d times and failed after %v, not once after answerTimeout %v", n, took, answerTimeout)
	}
}
