package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/internal/metrics"
)

// A request whose client went away before its answer is counted as 499 (the client closed
// it), not as the 503 its handler wrote to nobody: a dashboard of 5xx shows the service's
// failures, not its clients' impatience (docs/operations.md, "Metrics"). A 503 written to a
// client still there stays a 503.
func TestARequestWhoseClientWentAwayIsCountedAs499(t *testing.T) {
	m := metrics.New(metrics.Source{})
	started := make(chan struct{})
	h := m.Observe("read", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") != "" {
			close(started)
			<-r.Context().Done() // the charge waited on is given up with the request
		}
		httpx.WriteError(w, http.StatusServiceUnavailable, httpx.CodeInternal, "service temporarily unavailable")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/data/places/p1?wait=1", nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	cancel()
	<-done
	resp, err := http.Get(srv.URL + "/api/data/places/p1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	srv.Close() // waits for the handlers, so both requests are counted

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`kyapi_http_requests_total{api="read",method="GET",route="unmatched",status="499"} 1`,
		`kyapi_http_requests_total{api="read",method="GET",route="unmatched",status="503"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grep(string(body), "kyapi_http_requests_total"))
		}
	}
}

func grep(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
