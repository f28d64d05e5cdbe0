package readapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
	"github.com/kyapi/kyapi/readapi"
)

// fuzzCatalog is a small catalog for the query fuzzer: two towns, places with and without
// coordinates, menu and reviews, and events around fuzzNow.
const fuzzCatalog = `{"record":"town","slug":"lexington-fayette-urban-county","name":"Lexington","county":"Fayette","population":320000}
{"record":"town","slug":"paducah","name":"Paducah"}
{"record":"place","place_id":"lex-bar","name":"Bourbon Bar","category":"food.bar","town_slug":"lexington-fayette-urban-county","latitude":38.04,"longitude":-84.50,"rating":4.5,"rating_count":100,"is_gem":true,"local_gem_score":0.9,"menu":[{"name":"Old Fashioned","price":12}],"review_summary":{"summary":"Good.","confidence":0.7,"review_count":10}}
{"record":"place","place_id":"lex-cafe","name":"Cafe","category":"food.cafe","town_slug":"lexington-fayette-urban-county","latitude":38.05,"longitude":-84.49,"rating_count":50}
{"record":"place","place_id":"pad-nocoords","name":"Nowhere","category":"shop.books","town_slug":"paducah"}
{"record":"event","event_id":"ev-1","title":"Fair","event_type":"festival","start_date":"2025-06-20T15:00:00Z","town_slug":"paducah"}
`

// fuzzNow is the fixed clock of the fuzzed server.
var fuzzNow = time.Date(2025, 6, 15, 12, 0, 0, 0, time.UTC)

// fuzzRoutes are the ten data endpoints; "%s" is where the place id goes.
var fuzzRoutes = []string{
	"/api/data/places",
	"/api/data/places/%s",
	"/api/data/places/%s/menu",
	"/api/data/places/%s/reviews",
	"/api/data/places/%s/related",
	"/api/data/search",
	"/api/data/trending",
	"/api/data/hidden-gems",
	"/api/data/towns",
	"/api/data/events",
}

// newFuzzServer builds one read API over a fresh database holding fuzzCatalog, and a key
// whose balance and rate limit are large enough that neither 402 nor 429 hides how the
// parameters are parsed; balance reads the key's account balance from the write model.
func newFuzzServer(tb testing.TB) (h http.Handler, key string, balance func() int64) {
	tb.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(tb)
	store := eventstore.New(pool)
	clk := func() time.Time { return fuzzNow }
	imported, err := (commands.ImportCatalog{Store: store, Clock: clk}).Handle(ctx, strings.NewReader(fuzzCatalog), eventstore.Metadata{})
	if err != nil {
		tb.Fatalf("import: %v", err)
	}
	events := fuzzReadEvents(tb, pool, imported.Towns+imported.Places+imported.Events)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return projections.Catalog{Clock: clk}.Apply(ctx, tx, events)
	}); err != nil {
		tb.Fatalf("project catalog: %v", err)
	}
	index, err := bleveindex.Open(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = index.Close() })
	docs, err := projections.PlaceDocsFromEvents(events)
	if err != nil {
		tb.Fatal(err)
	}
	if err := index.Upsert(ctx, docs, nil, "fuzz"); err != nil {
		tb.Fatal(err)
	}

	meter := commands.NewMeter(store, clk, commands.MeterOptions{})
	tb.Cleanup(meter.Close)
	accounts := commands.Accounts{Store: store, Clock: clk}
	id, err := accounts.OpenAccount(ctx, "Fuzz Co", "fuzz@test.example", eventstore.Metadata{})
	if err != nil {
		tb.Fatal(err)
	}
	issued, err := accounts.IssueKey(ctx, id, eventstore.Metadata{})
	if err != nil {
		tb.Fatal(err)
	}
	for _, ref := range []string{"fuzz-1", "fuzz-2", "fuzz-3", "fuzz-4"} {
		if _, err := accounts.Purchase(ctx, id, 2_500_000, ref, eventstore.Metadata{}); err != nil {
			tb.Fatal(err)
		}
	}

	logger := logrus.New()
	logger.SetOutput(io.Discard)
	srv := &readapi.Server{
		Meter: meter, Pool: pool, Index: index, Clock: clk,
		CanonicalBaseURL: baseURL, RateLimitPerMinute: 1 << 30, Log: logger,
	}
	balance = func() int64 {
		var b int64
		if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE account_id = $1`, id).Scan(&b); err != nil {
			tb.Fatal(err)
		}
		return b
	}
	return srv.Handler(), issued.APIKey, balance
}

// fuzzReadEvents waits until the n imported catalog events are visible and returns them.
func fuzzReadEvents(tb testing.TB, pool *pgxpool.Pool, n int) []eventstore.Event {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, err := eventstore.ReadAll(context.Background(), pool, eventstore.Position{}, 1_000_000)
		if err != nil {
			tb.Fatal(err)
		}
		if len(events) >= n {
			return events
		}
		if time.Now().After(deadline) {
			tb.Fatalf("only %d of %d imported events became visible", len(events), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fuzzTarget is the request target for one of the ten endpoints. The place id goes into the
// path raw when it makes a valid request URI (so "..", "%2F" and the like reach the router
// as a client could send them), escaped otherwise. The query is used as sent, unparsed.
func fuzzTarget(endpoint uint8, rawQuery, placeID string) *url.URL {
	tpl := fuzzRoutes[int(endpoint)%len(fuzzRoutes)]
	if !strings.Contains(tpl, "%s") {
		return &url.URL{Path: tpl, RawQuery: rawQuery}
	}
	before, after, _ := strings.Cut(tpl, "%s")
	u, err := url.ParseRequestURI(before + placeID + after)
	if err != nil || u.RawQuery != "" || u.Fragment != "" {
		u = &url.URL{Path: before + placeID + after, RawPath: before + url.PathEscape(placeID) + after}
	}
	u.RawQuery = rawQuery
	return u
}

// FuzzQueryParameters: whatever the query string and place id, every data endpoint answers
// without a panic or a 5xx, with the success envelope or the error body, and an error answer
// leaves the balance as it was.
func FuzzQueryParameters(f *testing.F) {
	long := strings.Repeat("x", 10_000)
	for _, s := range []struct {
		endpoint uint8
		query    string
		placeID  string
	}{
		{0, "town=lexington&q=bourbon&limit=10&offset=0", ""},
		{0, "limit=101", ""},
		{0, "limit=-1&offset=10001", ""},
		{1, "", "lex-bar"},
		{2, "", "lex-bar"},
		{3, "", "pad-nocoords"},
		{4, "", "lex-cafe"},
		{5, "lat=38.04&lng=-84.5&radius=50&limit=100&offset=10000", ""},
		{5, "lat=NaN&lng=Inf&radius=0x10", ""},
		{7, "town=%00&limit=1e3", ""},
		{9, "from=2026-02-30&to=2026-01-01", ""},
		{0, "q=" + long, ""},
		{1, "", strings.Repeat("a", 5000)},
		{1, "", "../../admin"},
		{1, "", "a%2Fb"},
		{8, "town=\xff\xfe&q=\x80", ""},
		{9, "town=" + url.QueryEscape(long[:3000]), ""},
		{7, "town=" + strings.Repeat("%E2%82%AC", 1000), ""},
		{0, "town=" + strings.Repeat("t", 101) + "&q=" + strings.Repeat("q", 200), ""},
		{5, "lat=" + strings.Repeat("0", 40) + "&lng=1", ""},
		{2, "", strings.Repeat("m", 129)},
	} {
		f.Add(s.endpoint, s.query, s.placeID)
	}
	h, key, balance := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, endpoint uint8, rawQuery, placeID string) {
		before := balance()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL = fuzzTarget(endpoint, rawQuery, placeID)
		req.RequestURI = req.URL.RequestURI()
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		status, body := rec.Code, rec.Body.Bytes()
		where := req.URL.RequestURI()
		if status >= 500 {
			t.Fatalf("GET %q: status %d: %s", where, status, body)
		}
		switch status {
		case http.StatusUnauthorized, http.StatusPaymentRequired, http.StatusTooManyRequests:
			t.Fatalf("GET %q: status %d masks parameter parsing (fixture problem): %s", where, status, body)
		}
		var v map[string]json.RawMessage
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("GET %q: status %d, body is not a JSON object: %v: %q", where, status, err, body)
		}
		if status == http.StatusOK {
			if _, ok := v["data"]; !ok {
				t.Fatalf("GET %q: 200 without data: %s", where, body)
			}
			if _, ok := v["meta"]; !ok {
				t.Fatalf("GET %q: 200 without meta: %s", where, body)
			}
			if rec.Header().Get("X-Credits-Remaining") == "" {
				t.Fatalf("GET %q: 200 without X-Credits-Remaining", where)
			}
			return
		}
		if status < 400 {
			t.Fatalf("GET %q: unexpected status %d: %s", where, status, body)
		}
		if after := balance(); after != before {
			t.Fatalf("GET %q: %d charged %d credits: %s", where, status, before-after, body)
		}
		var e struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error == "" || e.Code == "" {
			t.Fatalf("GET %q: %d without the error body: %s", where, status, body)
		}
	})
}
