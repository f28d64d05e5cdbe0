package app_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// docs/operations.md, "Metrics": the labels of kyapi_http_requests_total are a bounded set,
// its method one of the standard HTTP methods or "other". Methods an anonymous caller makes up
// on the public read port are counted as "other", not each as a new series.
func TestInventedHTTPMethodsAreCountedAsOtherNotAsNewSeries(t *testing.T) {
	svc := apptest.Start(t, 60)
	const invented = 40
	for i := range invented {
		req, err := http.NewRequest(fmt.Sprintf("XMETHOD%04d", i), svc.ReadURL+"/api/data/towns", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := http.Get(svc.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	standard := map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true,
		"DELETE": true, "OPTIONS": true, "CONNECT": true, "TRACE": true}
	re := regexp.MustCompile(`(?m)^kyapi_http_requests_total\{api="read",[^}]*method="([^"]*)"[^}]*\} ([0-9.e+]+)$`)
	var others float64
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		switch {
		case m[1] == "other":
			v, _ := strconv.ParseFloat(m[2], 64)
			others += v
		case !standard[m[1]]:
			t.Errorf("kyapi_http_requests_total has a series for the method %q", m[1])
		}
	}
	if others != invented {
		t.Fatalf("%v read requests counted under method=\"other\", want the %d with invented methods", others, invented)
	}
}
