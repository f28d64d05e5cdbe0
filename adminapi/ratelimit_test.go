package adminapi_test

import (
	"context"
	"strings"
	"testing"
)

func TestARateLimitIsSetShownInTheAccountAndLedgerAndReturnedToTheDefault(t *testing.T) {
	f := newFixture(t)
	id := f.openAccount("Bluegrass Tours")
	if v, ok := f.call("GET", "/admin/accounts/"+id, "").data()["rate_limit_per_minute"]; !ok || v != nil {
		t.Fatalf("a new account's rate_limit_per_minute is %v (present %v), want null", v, ok)
	}

	r := f.call("PUT", "/admin/accounts/"+id+"/rate-limit", `{"requests_per_minute": 600}`)
	f.expect(r, 200, "")
	if r.data()["account_id"] != id || num(r.data()["rate_limit_per_minute"]) != 600 {
		t.Fatalf("answer %s", r.raw)
	}
	if v := f.call("GET", "/admin/accounts/"+id, "").data()["rate_limit_per_minute"]; num(v) != 600 {
		t.Fatalf("account view rate_limit_per_minute %v, want 600", v)
	}

	r = f.call("PUT", "/admin/accounts/"+id+"/rate-limit", `{"requests_per_minute": null}`)
	f.expect(r, 200, "")
	if v, ok := r.data()["rate_limit_per_minute"]; !ok || v != nil {
		t.Fatalf("answer to null %s", r.raw)
	}
	if v := f.call("GET", "/admin/accounts/"+id, "").data()["rate_limit_per_minute"]; v != nil {
		t.Fatalf("account view after null: %v, want null", v)
	}

	ledger := f.call("GET", "/admin/accounts/"+id+"/ledger", "")
	f.expect(ledger, 200, "")
	rows, _ := ledger.body["data"].([]any)
	var set []map[string]any
	for _, row := range rows {
		if m := row.(map[string]any); m["type"] == "RateLimitSet" {
			set = append(set, m)
		}
	}
	if len(set) != 2 {
		t.Fatalf("%d RateLimitSet ledger entries, want 2: %s", len(set), ledger.raw)
	}
	for i, want := range []any{float64(600), nil} {
		p, _ := set[i]["payload"].(map[string]any)
		if num(set[i]["credits_delta"]) != 0 || p["requests_per_minute"] != want {
			t.Errorf("entry %d: %v", i, set[i])
		}
	}
}

func TestBadRateLimitBodiesAre400AndChangeNothing(t *testing.T) {
	f := newFixture(t)
	id := f.openAccount("Bluegrass Tours")
	for _, c := range []struct{ body, says string }{
		{``, "request body is required"},
		{`{}`, "requests_per_minute: is required"},
		{`{"requests_per_minute": 0}`, "from 1 to 100000"},
		{`{"requests_per_minute": -5}`, "from 1 to 100000"},
		{`{"requests_per_minute": 100001}`, "from 1 to 100000"},
		{`{"requests_per_minute": 99999999999999999999}`, "JSON integer"},
		{`{"requests_per_minute": 1.5}`, "JSON integer"},
		{`{"requests_per_minute": 6e1}`, "JSON integer"},
		{`{"requests_per_minute": "60"}`, "JSON integer"},
		{`{"requests_per_minute": 60, "burst": 5}`, "unknown field"},
		{`{"requests_per_minute": 60} {}`, "single JSON object"},
		{`[60]`, ""},
		{`{"requests_per_minute": `, "malformed JSON"},
	} {
		r := f.call("PUT", "/admin/accounts/"+id+"/rate-limit", c.body)
		f.expect(r, 400, "bad_request")
		if msg, _ := r.body["error"].(string); !strings.Contains(msg, c.says) {
			t.Errorf("body %q: error %q, want it to say %q", c.body, msg, c.says)
		}
	}
	f.expect(f.call("PUT", "/admin/accounts/acc_nope/rate-limit", `{"requests_per_minute": 60}`), 404, "not_found")
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE type = 'RateLimitSet'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused calls wrote %d RateLimitSet events (%v)", n, err)
	}
}
