package adminapi_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
)

func TestAStatementSumsItsDaysAndRefusesBadOnesNamingTheParameter(t *testing.T) {
	f := newFixture(t)
	acc := f.history() // opened, key, 1000 and 2000 credits bought on 2026-03-01
	path := "/admin/accounts/" + acc + "/statement?"
	r := f.call("GET", path+"from=2026-03-01&to=2026-03-02", "")
	f.expect(r, 200, "")
	d := r.data()
	p, _ := d["purchases"].(map[string]any)
	if num(d["opening_balance"]) != 0 || num(d["closing_balance"]) != 3000 || num(p["count"]) != 2 ||
		num(p["credits"]) != 3000 || num(p["cents"]) != 1500 || d["from"] != "2026-03-01" || d["to"] != "2026-03-02" ||
		d["account_id"] != acc {
		t.Fatalf("statement of the first day: %s", r.raw)
	}
	if charges, ok := d["charges"].([]any); !ok || len(charges) != 0 {
		t.Fatalf("charges: %s", r.raw)
	}
	later := f.call("GET", path+"from=2026-03-02&to=2026-04-01", "").data()
	if num(later["opening_balance"]) != 3000 || num(later["closing_balance"]) != 3000 || num(later["purchases"].(map[string]any)["count"]) != 0 {
		t.Fatalf("statement of the days after: %v", later)
	}
	empty := f.call("GET", path+"from=2026-03-01&to=2026-03-01", "").data()
	if num(empty["opening_balance"]) != 0 || num(empty["closing_balance"]) != 0 {
		t.Fatalf("an empty window: %v", empty)
	}
	for _, c := range []struct{ query, names string }{
		{"to=2026-03-02", "from"},
		{"from=2026-03-01", "to"},
		{"from=2026-13-01&to=2026-03-02", "from"},
		{"from=2026-03-01&to=tomorrow", "to"},
		{"from=2026-03-01T00:00:00Z&to=2026-03-02", "from"},
		{"from=2026-3-1&to=2026-03-02", "from"},
		{"from=2026-03-02&to=2026-03-01", "from"},
		{"from=%00&to=2026-03-01", "from"},
	} {
		r := f.call("GET", path+c.query, "")
		f.expect(r, 400, "bad_request")
		if msg, _ := r.body["error"].(string); !strings.HasPrefix(msg, c.names) {
			t.Errorf("%s: %q does not start with the parameter %q", c.query, msg, c.names)
		}
	}
	f.expect(f.call("GET", "/admin/accounts/acc_missing/statement?from=2026-03-01&to=2026-03-02", ""), 404, "not_found")
}

// getRaw fetches a non-JSON admin answer.
func (f *fixture) getRaw(path string) (*http.Response, string) {
	f.t.Helper()
	req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp, string(b)
}

// The CSV export holds exactly the JSON ledger's entries, in its order, past one page.
func TestTheLedgerCSVHoldsTheJSONLedgersEntriesWithAHeaderRow(t *testing.T) {
	f := newFixture(t)
	acc := f.history()
	accounts := commands.Accounts{Store: eventstore.New(f.pool), Clock: f.clock.Now}
	for i := 0; i < 1100; i++ {
		f.clock.Advance(time.Second)
		if _, err := accounts.Purchase(context.Background(), acc, 500, fmt.Sprint("bulk-", i), eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	var ledger []map[string]any
	for after := int64(0); ; {
		r := f.call("GET", "/admin/accounts/"+acc+"/ledger?limit=1000&after="+strconv.FormatInt(after, 10), "")
		rows, _ := r.body["data"].([]any)
		if len(rows) == 0 {
			break
		}
		for _, row := range rows {
			ledger = append(ledger, row.(map[string]any))
		}
		after = num(r.body["next_after"])
	}
	check := func(query string, want []map[string]any) {
		t.Helper()
		resp, body := f.getRaw("/admin/accounts/" + acc + "/ledger.csv" + query)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") {
			t.Fatalf("ledger.csv%s: %d %s", query, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		records, err := csv.NewReader(strings.NewReader(body)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(records[0], ",") != "position,version,type,recorded_at,credits_delta,balance_after,payload" {
			t.Fatalf("header row %v", records[0])
		}
		if len(records)-1 != len(want) {
			t.Fatalf("ledger.csv%s: %d rows, the JSON ledger %d", query, len(records)-1, len(want))
		}
		for i, rec := range records[1:] {
			e := want[i]
			payload, _ := json.Marshal(e["payload"])
			var got any
			if err := json.Unmarshal([]byte(rec[6]), &got); err != nil {
				t.Fatalf("row %d payload %q: %v", i, rec[6], err)
			}
			gotPayload, _ := json.Marshal(got)
			if rec[0] != fmt.Sprint(num(e["position"])) || rec[1] != fmt.Sprint(num(e["version"])) || rec[2] != e["type"] ||
				rec[3] != e["recorded_at"] || rec[4] != fmt.Sprint(num(e["credits_delta"])) || rec[5] != fmt.Sprint(num(e["balance_after"])) ||
				string(gotPayload) != string(payload) {
				t.Fatalf("row %d: %v, the JSON ledger %v", i, rec, e)
			}
		}
	}
	if len(ledger) != 1104 {
		t.Fatalf("JSON ledger: %d entries", len(ledger))
	}
	check("", ledger)
	check("?after="+fmt.Sprint(num(ledger[1049]["position"])), ledger[1050:])
	for _, q := range []string{"?after=-1", "?after=x"} {
		r := f.call("GET", "/admin/accounts/"+acc+"/ledger.csv"+q, "")
		f.expect(r, 400, "bad_request")
	}
	f.expect(f.call("GET", "/admin/accounts/acc_missing/ledger.csv", ""), 404, "not_found")
}

func TestTheNewestDigestIsServedAnd404BeforeAny(t *testing.T) {
	f := newFixture(t)
	r := f.call("GET", "/admin/digest", "")
	f.expect(r, 404, "not_found")
	if !strings.Contains(r.body["error"].(string), "kyapi digest") {
		t.Errorf("the 404 does not say how to take one: %s", r.raw)
	}
	f.history()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	for i := 0; i < 2; i++ {
		d, err := audit.TakeDigest(context.Background(), f.pool, key, t0.Add(time.Duration(i)*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.SaveDigest(context.Background(), f.pool, d); err != nil {
			t.Fatal(err)
		}
	}
	r = f.call("GET", "/admin/digest", "")
	f.expect(r, 200, "")
	d, err := audit.ParseDigest([]byte(r.raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.CheckDigest(d, key.Public().(ed25519.PublicKey)); err != nil {
		t.Fatalf("the served digest does not check: %v\n%s", err, r.raw)
	}
	if !d.TakenAt.Equal(t0.Add(time.Hour)) || d.Streams != 1 || d.Events != 4 {
		t.Fatalf("served %+v, want the newest digest", d)
	}
}

// An export resumed at the newest position (nothing new since) is still a CSV: its header
// row and no entry, not an empty body.
func TestALedgerCSVResumedAtItsNewestPositionIsItsHeaderRow(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Resumed")
	f.call("POST", "/admin/accounts/"+acc+"/purchases", `{"amount_cents":500,"payment_ref":"csv-resume"}`)
	_, whole := f.getRaw("/admin/accounts/" + acc + "/ledger.csv")
	lines := strings.Split(strings.TrimSpace(whole), "\n")
	last, _, _ := strings.Cut(lines[len(lines)-1], ",")
	const header = "position,version,type,recorded_at,credits_delta,balance_after,payload\n"
	for _, after := range []string{last, "9223372036854775807"} {
		resp, body := f.getRaw("/admin/accounts/" + acc + "/ledger.csv?after=" + after)
		if resp.StatusCode != http.StatusOK || body != header {
			t.Errorf("after=%s: %d %q; want 200 and the header row alone", after, resp.StatusCode, body)
		}
	}
}

// A cursor or limit the query string holds but url.Values would drop (a ';', a broken
// %-escape) or one given twice is a 400 naming it: read as the default, a client asking for
// page N would get the first page as if it were page N.
func TestAHistoryParameterThatDoesNotParseIs400NamingIt(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Cursor")
	for _, c := range []struct{ route, query, param string }{
		{"ledger", "after=2;", "after"},
		{"ledger", "after=2%zz", "after"},
		{"ledger", "limit=1;x", "limit"},
		{"ledger", "after=5&after=0", "after"},
		{"ledger.csv", "after=2;", "after"},
		{"ledger.csv", "after=5&after=0", "after"},
		{"statement", "from=2026-03-01&to=2026-03-02;", "to"},
		{"statement", "from=2026-03-01&from=2026-03-02&to=2026-03-03", "from"},
		{"balance-at", "at=2026-03-01T00:00:00Z%zz", "at"},
	} {
		r := f.call("GET", "/admin/accounts/"+acc+"/"+c.route+"?"+c.query, "")
		f.expect(r, http.StatusBadRequest, "bad_request")
		if msg := fmt.Sprint(r.body["error"]); !strings.Contains(msg, `"`+c.param+`"`) {
			t.Errorf("%s?%s: %s; want the message to name %q", c.route, c.query, msg, c.param)
		}
	}
}
