package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/internal/apptest"
)

// TestMetricsCountTheTrafficTheServiceAnswered drives paid, deduplicated, refused (402) and
// rate-limited (429) requests through the real service, then scrapes /metrics without the
// admin token and finds each counter moved, and no key, token or e-mail in it.
func TestMetricsCountTheTrafficTheServiceAnswered(t *testing.T) {
	svc := apptest.Start(t, 5)
	status, body := svc.Admin(t, http.MethodPost, "/admin/catalog/import",
		`{"record":"town","slug":"berea","name":"Berea"}`+"\n"+`{"record":"place","place_id":"plc_a","name":"A","category":"food","town_slug":"berea"}`)
	if status != http.StatusOK {
		t.Fatalf("import: %d %s", status, body)
	}
	rich := openAccountWithKey(t, svc, "Rich", "rich@example.com", true)
	poor := openAccountWithKey(t, svc, "Poor", "poor@example.com", false)

	// The catalog is a projection: wait until the place is in it, without spending the keys'
	// requests (5 a minute) on 404s while a loaded machine catches up.
	conn, err := pgx.Connect(context.Background(), svc.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var projected bool
		if err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM rm_places WHERE place_id = 'plc_a')`).Scan(&projected); err != nil {
			t.Fatal(err)
		}
		if projected {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the imported place never reached the catalog read model")
		}
	}
	if st, b := svc.Read(t, "/api/data/places/plc_a", rich); st != http.StatusOK {
		t.Fatalf("place detail: %d %s", st, b)
	}
	if st, b := svc.Read(t, "/api/data/places/plc_a", rich); st != http.StatusOK { // deduplicated
		t.Fatalf("second detail: %d %s", st, b)
	}
	if st, b := svc.Read(t, "/api/data/places/plc_a", poor); st != http.StatusPaymentRequired {
		t.Fatalf("poor account: want 402, got %d %s", st, b)
	}
	limited := false
	for range 10 {
		if st, _ := svc.Read(t, "/api/data/towns", poor); st == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	if !limited {
		t.Fatal("no 429 after 10 requests at a limit of 5 a minute")
	}

	req, _ := http.NewRequest(http.MethodGet, svc.AdminURL+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var sb strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	text := sb.String()

	atLeast := func(series string, min float64) {
		t.Helper()
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+]+)$`)
		m := re.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("no series %s", series)
			return
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		if v < min {
			t.Errorf("%s = %v, want at least %v", series, v, min)
		}
	}
	atLeast(`kyapi_http_requests_total{api="read",method="GET",route="/api/data/places/{placeId}",status="200"}`, 2)
	atLeast(`kyapi_http_requests_total{api="read",method="GET",route="/api/data/places/{placeId}",status="402"}`, 1)
	atLeast(`kyapi_http_requests_total{api="admin",method="POST",route="/admin/catalog/import",status="200"}`, 1)
	atLeast(`kyapi_http_request_duration_seconds_count{api="read",route="/api/data/places/{placeId}"}`, 3)
	atLeast(`kyapi_charges_total{outcome="paid"}`, 1)
	atLeast(`kyapi_charges_total{outcome="deduplicated"}`, 1)
	atLeast(`kyapi_charges_total{outcome="refused"}`, 1)
	atLeast(`kyapi_credits_charged_total`, 1)
	atLeast(`kyapi_read_refused_total{status="402"}`, 1)
	atLeast(`kyapi_read_refused_total{status="429"}`, 1)
	atLeast(`kyapi_meter_batch_size_count`, 2)
	atLeast(`kyapi_meter_claims_held`, 1) // the places paid above
	atLeast(`kyapi_meter_claims_forgotten_total`, 0)
	atLeast(`kyapi_meter_claim_reads_total{kind="cold"}`, 0)
	atLeast(`kyapi_meter_claim_reads_total{kind="behind"}`, 0)
	atLeast(`kyapi_meter_decisions_total{from="lock"}`, 2)   // each account's first charge
	atLeast(`kyapi_meter_decisions_total{from="memory"}`, 1) // the second detail
	atLeast(`kyapi_meter_accounts_held`, 2)
	atLeast(`kyapi_db_pool_connections{state="max"}`, 1)
	atLeast(`kyapi_db_pool_acquires_total`, 1)
	for _, p := range []string{"balances", "account_days", "usage", "catalog", "placeindex"} {
		if !regexp.MustCompile(`(?m)^kyapi_projection_lag_events\{projection="` + p + `"\} [0-9]+$`).MatchString(text) {
			t.Errorf("no lag for projection %s", p)
		}
	}
	for _, secret := range []string{rich, poor, apptest.AdminToken, "rich@example.com", "poor@example.com"} {
		if strings.Contains(text, secret) {
			t.Errorf("/metrics holds a secret or an e-mail: %q", secret)
		}
	}
}

// openAccountWithKey opens an account, issues its key and, when funded, buys it credits.
func openAccountWithKey(t *testing.T, svc *apptest.Service, name, email string, funded bool) string {
	t.Helper()
	var opened struct {
		Data struct {
			AccountID string `json:"account_id"`
		} `json:"data"`
	}
	_, body := svc.Admin(t, http.MethodPost, "/admin/accounts", `{"name":"`+name+`","email":"`+email+`"}`)
	if err := json.Unmarshal([]byte(body), &opened); err != nil || opened.Data.AccountID == "" {
		t.Fatalf("open account: %s", body)
	}
	id := opened.Data.AccountID
	var key struct {
		Data struct {
			APIKey string `json:"api_key"`
		} `json:"data"`
	}
	_, body = svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/keys", "")
	if err := json.Unmarshal([]byte(body), &key); err != nil || key.Data.APIKey == "" {
		t.Fatalf("issue key: %s", body)
	}
	if funded {
		if st, b := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/purchases", `{"amount_cents":1000,"payment_ref":"pay-`+name+`"}`); st != http.StatusCreated {
			t.Fatalf("purchase: %d %s", st, b)
		}
	}
	return key.Data.APIKey
}
