package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/metrics"
)

// A projection stuck on a range it cannot apply shows in /metrics, not only as a lag that
// grows (which a slow one shows too): kyapi_projection_failed_tries is its failed tries in a
// row, 0 for one that moves.
func TestAFailingProjectionsTriesAreAMetric(t *testing.T) {
	m := metrics.New(metrics.Source{FailedTries: func() map[string]int { return map[string]int{"usage": 7, "catalog": 0} }})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{`kyapi_projection_failed_tries{projection="usage"} 7`, `kyapi_projection_failed_tries{projection="catalog"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, body)
		}
	}
}
