package app_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/apptest"
)

// docs/api.md, "Rate limit": the limit is per key, the account's own when set, for each of its
// keys; a key rotated into its grace keeps its window (rotation gives it no fresh quota), the
// new key starts its own, and an account limit changed while requests flow applies to both at
// their next request, the count of the window in progress kept. A 429 is never charged.
func TestAKeyInGraceKeepsItsWindowUnderTheAccountsLimit(t *testing.T) {
	svc := apptest.Start(t, 3)
	var opened struct {
		Data struct {
			AccountID string `json:"account_id"`
		} `json:"data"`
	}
	_, body := svc.Admin(t, http.MethodPost, "/admin/accounts", `{"name":"G","email":"g@example.com"}`)
	if err := json.Unmarshal([]byte(body), &opened); err != nil {
		t.Fatal(body)
	}
	id := opened.Data.AccountID
	issue := func() string {
		var key struct {
			Data struct {
				APIKey string `json:"api_key"`
			} `json:"data"`
		}
		_, body := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/keys", "")
		if err := json.Unmarshal([]byte(body), &key); err != nil || key.Data.APIKey == "" {
			t.Fatalf("issue key: %s", body)
		}
		return key.Data.APIKey
	}
	if st, b := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/purchases", `{"amount_cents":500,"payment_ref":"g1"}`); st != http.StatusCreated {
		t.Fatalf("purchase: %d %s", st, b)
	}
	get := func(key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, svc.ReadURL+"/api/data/towns", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	expect := func(key string, status, limit, remaining int) {
		t.Helper()
		r := get(key)
		if r.StatusCode != status || r.Header.Get("X-RateLimit-Limit") != strconv.Itoa(limit) ||
			r.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(remaining) {
			t.Fatalf("want %d limit %d remaining %d, got %d limit %s remaining %s", status, limit, remaining,
				r.StatusCode, r.Header.Get("X-RateLimit-Limit"), r.Header.Get("X-RateLimit-Remaining"))
		}
		reset, _ := strconv.ParseInt(r.Header.Get("X-RateLimit-Reset"), 10, 64)
		if d := time.Until(time.Unix(reset, 0)); d <= 0 || d > 61*time.Second {
			t.Fatalf("X-RateLimit-Reset %d is %v from now", reset, d)
		}
		if status == http.StatusTooManyRequests {
			ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
			if err != nil || ra < 1 || ra > 60 {
				t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
			}
		}
	}
	old := issue()
	expect(old, 200, 3, 2)
	expect(old, 200, 3, 1)
	expect(old, 200, 3, 0)
	expect(old, 429, 3, 0)
	fresh := issue() // old enters its grace
	expect(old, 429, 3, 0)
	expect(fresh, 200, 3, 2)
	if st, b := svc.Admin(t, http.MethodPut, "/admin/accounts/"+id+"/rate-limit", `{"requests_per_minute":5}`); st != http.StatusOK {
		t.Fatalf("set limit: %d %s", st, b)
	}
	expect(old, 200, 5, 1)
	expect(old, 200, 5, 0)
	expect(old, 429, 5, 0)
	expect(fresh, 200, 5, 3)
	if st, b := svc.Admin(t, http.MethodPut, "/admin/accounts/"+id+"/rate-limit", `{"requests_per_minute":1}`); st != http.StatusOK {
		t.Fatalf("set limit: %d %s", st, b)
	}
	expect(fresh, 429, 1, 0)

	var view struct {
		Data struct {
			Balance int64 `json:"balance"`
		} `json:"data"`
	}
	_, body = svc.Admin(t, http.MethodGet, "/admin/accounts/"+id, "")
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatal(body)
	}
	if view.Data.Balance != 1000-10 { // towns paid once, then deduplicated; no 429 charged
		t.Fatalf("balance %d, want %d", view.Data.Balance, 1000-10)
	}
}
