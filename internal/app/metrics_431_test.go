package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// docs/operations.md, "Metrics": kyapi_http_requests_total counts the requests answered. A
// request refused for its headers (over 16 KiB: 431 with the error body and an access-log
// line) is answered too, on either listener, and is counted under route "unmatched".
func TestARequestRefusedForItsHeadersIsCountedInTheRequestMetrics(t *testing.T) {
	svc := apptest.Start(t, 60)
	before := scrapeMetrics(t, svc)
	for _, base := range []string{svc.ReadURL + "/api/data/towns", svc.AdminURL + "/admin/accounts/x"} {
		req, err := http.NewRequest(http.MethodGet, base, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Padding", strings.Repeat("a", 20<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("%s with 20 KiB of headers: %d, want 431", base, resp.StatusCode)
		}
	}
	after := scrapeMetrics(t, svc)
	for _, api := range []string{"read", "admin"} {
		series := `kyapi_http_requests_total{api="` + api + `",method="GET",route="unmatched",status="431"}`
		if got := after[series] - before[series]; got != 1 {
			t.Errorf("%s moved by %v, want 1", series, got)
		}
	}
}
