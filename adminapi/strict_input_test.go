package adminapi_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A body encoding/json would decode only by altering it is refused: two payment references
// or outage ids that differ must never be taken for one (docs/api.md, "Admin API").
func TestBodiesTheDecoderWouldAlterAreRefusedAndAddNothing(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Buyer")
	f.issueKey(acc)
	purchases := "/admin/accounts/" + acc + "/purchases"
	f.expect(f.call("POST", purchases, `{"amount_cents":500,"payment_ref":"pay-1"}`), 201, "")
	for _, c := range []struct{ path, body, names string }{
		{purchases, `{"amount_cents":500,"payment_ref":"pay-\ud800"}`, `\ud800`},
		{purchases, `{"amount_cents":500,"payment_ref":"pay-\udc00"}`, `\udc00`},
		{purchases, "{\"amount_cents\":500,\"payment_ref\":\"p\xff\"}", "not UTF-8"},
		{purchases, `{"amount_cents":500,"AMOUNT_CENTS":2500000,"payment_ref":"pay-2"}`, `"AMOUNT_CENTS"`},
		{purchases, `{"Amount_Cents":500,"Payment_Ref":"pay-3"}`, `"Amount_Cents"`},
		{purchases, `{"amount_cents":500,"amount_cents":2500000,"payment_ref":"pay-4"}`, `"amount_cents" appears more than once`},
		{"/admin/bonus-grants", `{"outage_id":"o\ud800","credits":5}`, `\ud800`},
		{"/admin/bonus-grants", `{"outage_id":"o1","Credits":5}`, `"Credits"`},
		{"/admin/accounts", "{\"name\":\"Acme \xff\xfe\",\"email\":\"ops@acme.example\"}", "not UTF-8"},
	} {
		r := f.call("POST", c.path, c.body)
		if msg, _ := r.body["error"].(string); r.status != 400 || !strings.Contains(msg, c.names) {
			t.Errorf("POST %s %q: %d %s, want 400 naming %s", c.path, c.body, r.status, r.raw, c.names)
		}
	}
	if b := num(f.call("GET", "/admin/accounts/"+acc, "").data()["balance"]); b != 1000 {
		t.Errorf("balance %v after the refused bodies, want 1000 (the one purchase)", b)
	}
	// A surrogate pair is one character, and a different one from its neighbour.
	f.expect(f.call("POST", purchases, `{"amount_cents":500,"payment_ref":"pay-\ud83d\ude00"}`), 201, "")
	f.expect(f.call("POST", purchases, `{"amount_cents":500,"payment_ref":"pay-\ud83d\ude01"}`), 201, "")
}

// A NUL in any field of a body is refused before anything is written. A revoke's reason is
// kept only in the event's JSON payload, where PostgreSQL would have taken it: without the
// check the key was revoked and the NUL stayed in the ledger for good.
func TestANULInAnyFieldIsRefusedAndWritesNothing(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Nul")
	keyID := f.issueKey(acc)["key_id"].(string)
	var before int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM events`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	// Each answer names the field that holds an escaped NUL, as docs/limits.md says (found by
	// review).
	for _, c := range []struct{ path, body, field string }{
		{"/admin/accounts/" + acc + "/keys/" + keyID + "/revoke", `{"reason":"leaked\u0000"}`, "reason"},
		// A raw NUL byte makes the text no JSON at all: the body is named.
		{"/admin/accounts/" + acc + "/keys/" + keyID + "/revoke", "{\"reason\":\"leaked\x00\"}", "request body"},
		{"/admin/accounts/" + acc + "/purchases", `{"amount_cents":500,"payment_ref":"pay\u0000"}`, "payment_ref"},
		{"/admin/bonus-grants", `{"outage_id":"o1","credits":5,"reason":"\u0000"}`, "reason"},
		{"/admin/accounts", `{"name":"A\u0000","email":"ops@acme.example"}`, "name"},
	} {
		r := f.call("POST", c.path, c.body)
		if msg, _ := r.body["error"].(string); r.status != 400 || !strings.Contains(msg, "NUL") || !strings.HasPrefix(msg, c.field+":") {
			t.Errorf("POST %s %q: %d %s, want 400 naming the NUL and the field %s", c.path, c.body, r.status, r.raw, c.field)
		}
	}
	// An escaped backslash before u0000 is text, not a NUL.
	f.expect(f.call("POST", "/admin/accounts/"+acc+"/keys/"+keyID+"/revoke", `{"reason":"C:\\u0000"}`), 200, "")
	var after int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM events`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before+1 {
		t.Errorf("%d events appended, want 1 (the revoke with a backslash in its reason)", after-before)
	}
}

// A catalog line that is not UTF-8, or holds a lone surrogate, is a bad line: 400 naming it,
// and nothing of the batch applied.
func TestAnImportLineTheDecoderWouldAlterIsRefused(t *testing.T) {
	f := newFixture(t)
	for _, bad := range []string{
		"{\"record\":\"town\",\"slug\":\"corbin\",\"name\":\"Corbin \xff\xfe\"}",
		`{"record":"town","slug":"corbin","name":"Corbin \udc00"}`,
	} {
		body := `{"record":"town","slug":"berea","name":"Berea"}` + "\n" + bad + "\n"
		r := f.call("POST", "/admin/catalog/import", body)
		if msg, _ := r.body["error"].(string); r.status != 400 || !strings.Contains(msg, "line 2") {
			t.Errorf("%q: %d %s, want 400 naming line 2", bad, r.status, r.raw)
		}
	}
	var n int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d events stored by refused batches", n)
	}
}

// A line naming a field twice is refused, naming it, wherever the object is (the line, a
// nested record, an observation) and however the name is spelt: decoding keeps the last and
// would silently drop the other.
func TestAnImportLineNamingAFieldTwiceIsRefused(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct{ line, field string }{
		{`{"record":"town","slug":"paris","slug":"hazard","name":"Paris"}`, "slug"},
		{`{"record":"town","slug":"paris","\u0073lug":"hazard","name":"Paris"}`, "slug"},
		{`{"record":"town","town":{"slug":"paris","name":"Paris","name":"Hazard"}}`, "name"},
		{`{"record":"place","place_id":"p1","name":"P","category":"cafe","town_slug":"berea","latitude":37.5,"longitude":-84.3,` +
			`"sources":{"phone":[{"source":"a","value":"1","value":"2","observed_at":"2026-01-01T00:00:00Z"}]}}`, "sources.phone[0].value"},
		{`{"record":"place","place_id":"p1","name":"P","category":"cafe","town_slug":"berea","latitude":37.5,"longitude":-84.3,` +
			`"sources":{"hours":[{"source":"a","value":{"mon":[{"open":"09:00","open":"10:00"}]},"observed_at":"2026-01-01T00:00:00Z"}]}}`, `"open" twice`},
	} {
		body := `{"record":"town","slug":"berea","name":"Berea"}` + "\n" + c.line + "\n"
		r := f.call("POST", "/admin/catalog/import", body)
		if msg, _ := r.body["error"].(string); r.status != 400 || !strings.Contains(msg, "line 2") || !strings.Contains(msg, c.field) {
			t.Errorf("%s: %d %s, want 400 naming line 2 and %s", c.line, r.status, r.raw, c.field)
		}
	}
	var n int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d events stored by refused batches", n)
	}
}

// grace_until reads the same in the rotation's answer and in the account, whatever the
// server's time zone: the admin API answers every instant in UTC.
func TestGraceUntilIsShownInUTCWhateverTheServersZone(t *testing.T) {
	saved := time.Local
	time.Local = time.FixedZone("EST", -5*3600)
	t.Cleanup(func() { time.Local = saved })

	f := newFixture(t)
	acc := f.openAccount("Rotator")
	f.issueKey(acc)
	issued := f.issueKey(acc)
	found := false
	for _, k := range f.call("GET", "/admin/accounts/"+acc, "").data()["keys"].([]any) {
		k := k.(map[string]any)
		if k["key_id"] == issued["rotated_key_id"] {
			found = true
			if k["grace_until"] != issued["grace_until"] {
				t.Errorf("grace_until: the rotation answered %v, the account shows %v", issued["grace_until"], k["grace_until"])
			}
		}
	}
	if !found {
		t.Fatalf("the rotated key %v is not among the account's keys", issued["rotated_key_id"])
	}
}

// time.Parse takes an offset of ±24:00, which RFC 3339 does not and which encoding/json cannot
// write back: the import answered 500 (the event could not be stored). It is a bad line,
// named with its field, and nothing of the batch is applied.
func TestAnImportDateWithAnOffsetOf24HoursIsABadLine(t *testing.T) {
	f := newFixture(t)
	town := `{"record":"town","slug":"berea","name":"Berea"}`
	for _, c := range []struct{ line, field string }{
		{`{"record":"event","event_id":"e1","title":"T","start_date":"2026-12-01T10:00:00+24:00"}`, "start_date"},
		{`{"record":"event","event_id":"e1","title":"T","start_date":"2026-12-01T10:00:00Z","end_date":"2026-12-02T10:00:00-24:00"}`, "end_date"},
		{`{"record":"place","place_id":"p1","name":"N","category":"c","sources":{"name":[{"source":"a","value":"N","observed_at":"2026-01-01T00:00:00+24:00"}]}}`, "sources.name[0].observed_at"},
	} {
		var before int
		_ = f.pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&before)
		r := f.call("POST", "/admin/catalog/import", town+"\n"+c.line)
		f.expect(r, 400, "bad_request")
		if msg, _ := r.body["error"].(string); !strings.Contains(msg, "line 2") || !strings.Contains(msg, `"`+c.field+`"`) {
			t.Errorf("%s: the error does not name line 2 and field %s: %s", c.line, c.field, r.raw)
		}
		var after int
		_ = f.pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&after)
		if after != before {
			t.Errorf("%s: a refused batch wrote %d events", c.line, after-before)
		}
	}
}

// An id no account, key or grant can have (a NUL, bytes that are not UTF-8) is unknown, as a
// place id is on the read API: 404, not the 400 PostgreSQL's refusal of the text would give.
func TestAnIDNoRecordCanHaveIsNotFound(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Known")
	for _, path := range []string{"/admin/accounts/%00", "/admin/accounts/%FF", "/admin/accounts/%FF/ledger",
		"/admin/accounts/a%00b/balance-at?at=2026-01-01T00:00:00Z", "/admin/bonus-grants/a%00b", "/admin/bonus-grants/%C0%80"} {
		f.expect(f.call("GET", path, ""), 404, "not_found")
	}
	f.expect(f.call("POST", "/admin/accounts/%FF/purchases", `{"amount_cents":500,"payment_ref":"r1"}`), 404, "not_found")
	f.expect(f.call("POST", "/admin/accounts/"+acc+"/keys/%FF/revoke", ""), 404, "not_found")
	f.expect(f.call("PUT", "/admin/accounts/%00/rate-limit", `{"requests_per_minute":10}`), 404, "not_found")
}
