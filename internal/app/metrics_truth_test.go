package app_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/internal/apptest"
)

// scrapeMetrics reads the admin listener's /metrics and returns the value of each series.
func scrapeMetrics(t *testing.T, svc *apptest.Service) map[string]float64 {
	t.Helper()
	resp, err := http.Get(svc.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z_]+(?:\{(?:[^"}]|"[^"]*")*\})?) ([0-9.e+-]+)$`).FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] = v
	}
	return out
}

// waitForPlace waits until the catalog read model holds the place.
func waitForPlace(t *testing.T, svc *apptest.Service, id string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), svc.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var projected bool
		if err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM rm_places WHERE place_id = $1)`, id).Scan(&projected); err != nil {
			t.Fatal(err)
		}
		if projected {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("place %s never reached the catalog read model", id)
		}
	}
}

// docs/operations.md, "Metrics": each series says exactly what the service did — requests by
// route and status, charge outcomes, credits against the ledger, refusals for credits and rate.
func TestMetricsAgreeExactlyWithTheRequestsAnsweredAndTheLedger(t *testing.T) {
	svc := apptest.Start(t, 4)
	status, body := svc.Admin(t, http.MethodPost, "/admin/catalog/import",
		`{"record":"town","slug":"berea","name":"Berea"}`+"\n"+
			`{"record":"place","place_id":"plc_a","name":"A","category":"food","town_slug":"berea","rating_count":9}`+"\n"+
			`{"record":"place","place_id":"plc_b","name":"B","category":"food","town_slug":"berea","rating_count":1}`)
	if status != http.StatusOK {
		t.Fatalf("import: %d %s", status, body)
	}
	rich := openAccountWithKey(t, svc, "Rich", "rich@example.com", true)
	poor := openAccountWithKey(t, svc, "Poor", "poor@example.com", false)
	waitForPlace(t, svc, "plc_a")
	waitForPlace(t, svc, "plc_b")
	before := scrapeMetrics(t, svc)

	want := func(key, path string, status int) {
		t.Helper()
		if st, b := svc.Read(t, path, key); st != status {
			t.Fatalf("%s: want %d, got %d %s", path, status, st, b)
		}
	}
	want(rich, "/api/data/places/plc_a", 200)        // paid 1
	want(rich, "/api/data/places/plc_a", 200)        // deduplicated
	want(rich, "/api/data/places?town=berea", 200)   // plc_a free, plc_b paid 1: paid
	want(rich, "/api/data/places/plc_nope", 404)     // not charged
	want(rich, "/api/data/towns", 429)               // 5th in the minute
	want(poor, "/api/data/places/plc_a", 402)        // refused
	want(poor, "/api/data/towns", 402)               // refused
	want(poor, "/api/data/places?town=nowhere", 200) // nothing matched: no charge
	want(poor, "/api/data/places/plc_b", 402)        // refused
	want(poor, "/api/data/places/plc_b", 429)        // 5th in the minute

	after := scrapeMetrics(t, svc)
	delta := func(series string) float64 { return after[series] - before[series] }
	check := func(series string, n float64) {
		t.Helper()
		if got := delta(series); got != n {
			t.Errorf("%s moved by %v, want %v", series, got, n)
		}
	}
	check(`kyapi_http_requests_total{api="read",method="GET",route="/api/data/places/{placeId}",status="200"}`, 2)
	check(`kyapi_http_requests_total{api="read",method="GET",route="/api/data/places/{placeId}",status="404"}`, 1)
	check(`kyapi_http_requests_total{api="read",method="GET",route="/api/data/places/{placeId}",status="402"}`, 2)
	check(`kyapi_http_requests_total{api="read",method="GET",route="/api/data/places/{placeId}",status="429"}`, 1)
	check(`kyapi_http_requests_total{api="read",method="GET",route="/api/data/places",status="200"}`, 2)
	check(`kyapi_http_requests_total{api="read",method="GET",route="/api/data/towns",status="429"}`, 1)
	check(`kyapi_http_requests_total{api="read",method="GET",route="/api/data/towns",status="402"}`, 1)
	check(`kyapi_read_refused_total{status="402"}`, 3)
	check(`kyapi_read_refused_total{status="429"}`, 2)
	check(`kyapi_charges_total{outcome="paid"}`, 2)
	check(`kyapi_charges_total{outcome="deduplicated"}`, 1)
	check(`kyapi_charges_total{outcome="refused"}`, 3)
	check(`kyapi_credits_charged_total`, 2)

	// The credits counted are the ledger's charges.
	var charged int64
	conn, err := pgx.Connect(context.Background(), svc.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(sum(charged_credits), 0)::bigint FROM accounts`).Scan(&charged); err != nil {
		t.Fatal(err)
	}
	if float64(charged) != after[`kyapi_credits_charged_total`] {
		t.Errorf("kyapi_credits_charged_total = %v, the accounts were charged %d", after[`kyapi_credits_charged_total`], charged)
	}
}

// docs/operations.md, "Metrics": kyapi_projection_lag_events is the committed events a
// projection has still to apply; once the traffic stops and the projections catch up, it is 0
// for every one of them.
func TestProjectionLagFallsToZeroOnceTheProjectionsCatchUp(t *testing.T) {
	svc := apptest.Start(t, 60)
	if st, b := svc.Admin(t, http.MethodPost, "/admin/catalog/import",
		`{"record":"town","slug":"berea","name":"Berea"}`+"\n"+`{"record":"place","place_id":"plc_a","name":"A","category":"food","town_slug":"berea"}`); st != http.StatusOK {
		t.Fatalf("import: %d %s", st, b)
	}
	rich := openAccountWithKey(t, svc, "Rich", "rich@example.com", true)
	waitForPlace(t, svc, "plc_a")
	for range 3 {
		if st, b := svc.Read(t, "/api/data/places/plc_a", rich); st != http.StatusOK {
			t.Fatalf("detail: %d %s", st, b)
		}
	}
	if st, b := svc.Read(t, "/api/data/towns", rich); st != http.StatusOK {
		t.Fatalf("towns: %d %s", st, b)
	}
	var last map[string]float64
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		last = scrapeMetrics(t, svc)
		behind := 0
		for series, v := range last {
			if regexp.MustCompile(`^kyapi_projection_lag_events\{`).MatchString(series) && v != 0 {
				behind++
			}
		}
		if behind == 0 {
			break
		}
	}
	n := 0
	for series, v := range last {
		if regexp.MustCompile(`^kyapi_projection_(lag_events|lag_up|failed_tries)\{`).MatchString(series) {
			n++
			t.Logf("%s %v", series, v)
			if regexp.MustCompile(`^kyapi_projection_lag_events\{`).MatchString(series) && v != 0 {
				t.Errorf("%s = %v after the projections caught up", series, v)
			}
		}
	}
	if n == 0 {
		t.Fatal("no projection series")
	}
}
