package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/internal/metrics"
	"github.com/kyapi/kyapi/internal/syncbuf"
)

// The two routes the admin address serves outside the admin API's and the console's routers,
// /metrics and the /console redirect, get their access-log line and request id like any other,
// and are counted in kyapi_http_requests_total like any other (docs/operations.md, "Metrics").
func TestMetricsAndTheConsoleRedirectAreLoggedAndCounted(t *testing.T) {
	var buf syncbuf.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	log.SetFormatter(&logrus.JSONFormatter{})
	h := adminListener(http.NotFoundHandler(), http.NotFoundHandler(), metrics.New(metrics.Source{}), log)
	for _, c := range []struct {
		path   string
		status int
	}{{"/metrics", http.StatusOK}, {"/console", http.StatusMovedPermanently}} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, c.path, nil))
		id := w.Header().Get("X-Request-Id")
		if w.Code != c.status || id == "" {
			t.Fatalf("%s: %d, request id %q", c.path, w.Code, id)
		}
		if line := `"request_id":"` + id + `","route":"` + c.path + `","status":`; !strings.Contains(buf.String(), line) {
			t.Errorf("%s: no access-log line %s in %s", c.path, line, buf.String())
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, series := range []string{
		`kyapi_http_requests_total{api="admin",method="GET",route="/metrics",status="200"} 1`,
		`kyapi_http_requests_total{api="console",method="GET",route="/console",status="301"} 1`,
	} {
		if !strings.Contains(w.Body.String(), series+"\n") {
			t.Errorf("no %s in the metrics:\n%s", series, w.Body.String())
		}
	}
}
