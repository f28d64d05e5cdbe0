package app

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/adminapi"
	"github.com/kyapi/kyapi/console"
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

// A path that is not clean ("//", "." or ".." segments) is an admin API call like any other:
// without the token it is 401 with the error body, with it a 404 (no route is such a path),
// each with its access-log line — never a redirect that answers before the token is checked
// and logs nothing (docs/api.md, "Admin API").
func TestAnUncleanAdminPathIsAuthenticatedAndLoggedNotRedirected(t *testing.T) {
	var buf syncbuf.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	log.SetFormatter(&logrus.JSONFormatter{})
	admin := &adminapi.Server{Token: "admin-token", Log: log}
	h := adminListener(admin.Handler(), http.NotFoundHandler(), metrics.New(metrics.Source{}), log)
	for _, c := range []struct {
		method, path, token string
		status              int
		code                string
	}{
		{http.MethodGet, "/admin/./accounts/acc_1", "", http.StatusUnauthorized, "missing_api_key"},
		{http.MethodPost, "/admin//accounts", "", http.StatusUnauthorized, "missing_api_key"},
		{http.MethodPost, "/admin/accounts/../accounts", "wrong", http.StatusUnauthorized, "invalid_api_key"},
		{http.MethodPost, "/admin//accounts", "admin-token", http.StatusNotFound, "not_found"},
		{http.MethodGet, "/console/../admin/digest", "", http.StatusUnauthorized, "missing_api_key"},
	} {
		req := httptest.NewRequest(c.method, "http://127.0.0.1:8081/", strings.NewReader(`{"name":"x","email":"x@example.com"}`))
		req.URL.Path, req.RequestURI = c.path, c.path
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var body struct{ Code string }
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != c.status || body.Code != c.code {
			t.Errorf("%s %s: %d %q (Location %q), want %d %q", c.method, c.path, w.Code, body.Code, w.Header().Get("Location"), c.status, c.code)
			continue
		}
		id := w.Header().Get("X-Request-Id")
		if line := `"request_id":"` + id + `"`; id == "" || strings.Count(buf.String(), line) != 1 {
			t.Errorf("%s %s: want one access-log line with request id %q in %s", c.method, c.path, id, buf.String())
		}
	}
}

// A console path whose segments are "." or ".." only once unescaped (%2E%2E) is clean as sent,
// so the admin listener hands it to the console: the console answers it and logs it like any
// other page (its 404 page, with its security headers), never a redirect that answers before
// the access log and the page's headers (docs/api.md, "Admin API").
func TestAConsolePathWithEscapedDotSegmentsIsLoggedNotRedirected(t *testing.T) {
	var buf syncbuf.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	log.SetFormatter(&logrus.JSONFormatter{})
	con := &console.Server{Token: "admin-token", Log: log}
	h := adminListener(http.NotFoundHandler(), con.Handler(), metrics.New(metrics.Source{}), log)
	for _, path := range []string{"/console/accounts/%2E%2E/system", "/console/%2e/sign-in", "/console/static/%2E%2E/sign-in"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code/100 == 3 {
			t.Errorf("GET %s: %d to %q, want the console's own answer", path, w.Code, w.Header().Get("Location"))
			continue
		}
		id := w.Header().Get("X-Request-Id")
		if line := `"request_id":"` + id + `"`; id == "" || strings.Count(buf.String(), line) != 1 {
			t.Errorf("GET %s: %d; want one access-log line with request id %q in %s", path, w.Code, id, buf.String())
		}
		if w.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: %d without the console's security headers", path, w.Code)
		}
	}
}
