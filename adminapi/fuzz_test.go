package adminapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/adminapi"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// FuzzAdminBodies: whatever the body of an admin POST, the answer is never a panic or a
// 5xx, and every 4xx carries the error body.
func FuzzAdminBodies(f *testing.F) {
	for _, s := range []struct {
		route uint8
		body  string
	}{
		{0, `{"name":"Acme","email":"ops@acme.example"}`},
		{0, `{"name":"","email":"x"}`},
		{0, `{"name":"A","email":"a@example.com","plan":"gold"}`},
		{0, `[1,2,3]`},
		{1, `{"amount_cents":500,"payment_ref":"pay-1"}`},
		{1, `{"amount_cents":5e2,"payment_ref":"p"}`},
		{1, `{"amount_cents":99999999999999999999,"payment_ref":"p"}`},
		{2, `{"outage_id":"o-1","credits":10,"reason":"outage"}`},
		{2, `{"outage_id":"o-2","credits":-1}`},
		{3, ``},
		{3, `{"reason":"leaked"}`},
		{3, `{"reason":` + `"` + strings.Repeat("r", 501) + `"}`},
		{4, `{"record":"town","slug":"berea","name":"Berea"}`},
		{4, "{\"record\":\"place\",\"place_id\":\"p1\",\"name\":\"n\",\"category\":\"c\"}\nnot json\n"},
		{4, "\xff\xfe\x00"},
		{0, `{"name":"A","email":"a@example.com"} {}`},
	} {
		f.Add(s.route, []byte(s.body))
	}

	ctx := context.Background()
	pool := pgtest.NewPool(f)
	store := eventstore.New(pool)
	clk := &clock{t: t0}
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	accounts := commands.Accounts{Store: store, Clock: clk.Now}
	s := &adminapi.Server{
		Accounts: accounts,
		Import:   commands.ImportCatalog{Store: store, Clock: clk.Now},
		Views:    commands.Views{Pool: pool},
		Token:    adminToken,
		Log:      logger,
		Clock:    clk.Now,
	}
	h := s.Handler()
	acc, err := accounts.OpenAccount(ctx, "Fuzz Co", "fuzz@example.com", eventstore.Metadata{})
	if err != nil {
		f.Fatal(err)
	}
	key, err := accounts.IssueKey(ctx, acc, eventstore.Metadata{})
	if err != nil {
		f.Fatal(err)
	}
	paths := []string{
		"/admin/accounts",
		"/admin/accounts/" + acc + "/purchases",
		"/admin/bonus-grants",
		"/admin/accounts/" + acc + "/keys/" + key.KeyID + "/revoke",
		"/admin/catalog/import",
	}

	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := paths[int(route)%len(paths)]
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		status, out := rec.Code, rec.Body.Bytes()
		if status >= 500 {
			t.Fatalf("POST %s %q: status %d: %s", path, body, status, out)
		}
		var v map[string]json.RawMessage
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("POST %s %q: status %d, body is not a JSON object: %q", path, body, status, out)
		}
		if status < 300 {
			if _, ok := v["data"]; !ok {
				t.Fatalf("POST %s %q: %d without data: %s", path, body, status, out)
			}
			return
		}
		if status < 400 {
			t.Fatalf("POST %s %q: unexpected status %d: %s", path, body, status, out)
		}
		var e struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if err := json.Unmarshal(out, &e); err != nil || e.Error == "" || e.Code == "" {
			t.Fatalf("POST %s %q: %d without the error body: %s", path, body, status, out)
		}
	})
}

func TestOversizedAdminBodiesAndImportLinesAreRefused(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Big")

	pad := func(n int) string { return `{"name":"` + strings.Repeat("a", n) + `","email":"a@example.com"}` }
	f.expect(f.call("POST", "/admin/accounts", pad(1<<20)), 413, "bad_request")
	f.expect(f.call("POST", "/admin/accounts/"+acc+"/purchases", `{"amount_cents":500,"payment_ref":"`+strings.Repeat("p", 1<<20)+`"}`), 413, "bad_request")

	// One line just over 1 MiB: refused by the line limit, naming the line.
	town := `{"record":"town","slug":"big","name":"` + strings.Repeat("n", 1<<20) + `"}`
	r := f.call("POST", "/admin/catalog/import", "\n"+town+"\n")
	f.expect(r, 400, "bad_request")
	if msg, _ := r.body["error"].(string); !strings.Contains(msg, "line 2") {
		t.Fatalf("line limit error %q does not name line 2", msg)
	}

	// A batch over 64 MiB of short valid lines is refused with 413 and nothing of it is
	// stored, even when the limit cuts a line in two.
	line := `{"record":"town","slug":"t","name":"T","county":"` + strings.Repeat("n", 1000) + `"}` + "\n"
	r = f.call("POST", "/admin/catalog/import", strings.Repeat(line, (64<<20)/len(line)+1))
	f.expect(r, 413, "bad_request")
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = 'town-t'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("oversized import stored %d events (%v)", n, err)
	}
}

// FuzzStatementDays: whatever the from and to of a statement, the answer is a 200 or a 400
// with the error body, never a 5xx.
func FuzzStatementDays(f *testing.F) {
	for _, s := range [][2]string{
		{"2026-03-01", "2026-03-02"}, {"0001-01-01", "9999-12-31"}, {"0000-01-01", "2026-01-01"},
		{"2026-02-29", "2026-03-01"}, {"2026-03-02", "2026-03-01"}, {"", ""}, {"2026-03-01\x00", "x"},
		{"+2026-03-01", "2026-3-1"}, {"2026-03-01T00:00:00Z", "2026-03-01"},
	} {
		f.Add(s[0], s[1])
	}
	ctx := context.Background()
	pool := pgtest.NewPool(f)
	store := eventstore.New(pool)
	clk := &clock{t: t0}
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	accounts := commands.Accounts{Store: store, Clock: clk.Now}
	h := (&adminapi.Server{Accounts: accounts, Views: commands.Views{Pool: pool}, Token: adminToken, Log: logger, Clock: clk.Now}).Handler()
	acc, err := accounts.OpenAccount(ctx, "Fuzz Co", "fuzz@example.com", eventstore.Metadata{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, from, to string) {
		q := url.Values{"from": {from}, "to": {to}}
		req := httptest.NewRequest(http.MethodGet, "/admin/accounts/"+acc+"/statement?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var e struct {
			Data  json.RawMessage `json:"data"`
			Error string          `json:"error"`
			Code  string          `json:"code"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
			t.Fatalf("from %q to %q: %d, not JSON: %s", from, to, rec.Code, rec.Body)
		}
		switch {
		case rec.Code == http.StatusOK && e.Data != nil:
		case rec.Code == http.StatusBadRequest && e.Code == "bad_request" && e.Error != "":
		default:
			t.Fatalf("from %q to %q: %d %s", from, to, rec.Code, rec.Body)
		}
	})
}
