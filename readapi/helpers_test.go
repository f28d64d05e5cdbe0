package readapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/openapi/openapitest"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
	"github.com/kyapi/kyapi/ratelimit"
	"github.com/kyapi/kyapi/readapi"
)

var ctx = context.Background()

const (
	lexington  = "lexington-fayette-urban-county"
	louisville = "louisville-jefferson-county-metro-government-balance"
	baseURL    = "https://kyapi.example"
)

// start is the test clock's first reading: mid-June 2025, UTC.
var start = time.Date(2025, 6, 15, 12, 0, 0, 0, time.UTC)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// stack is a read API over a real database and an embedded place index, loaded with the
// test catalog.
type stack struct {
	t        *testing.T
	pool     *pgxpool.Pool
	clock    *clock
	accounts commands.Accounts
	meter    *commands.Meter
	server   *httptest.Server
	api      readapi.Server // what server serves, for another server over the same stack
	log      *bytes.Buffer
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return newStackOn(t, pgtest.NewPool(t))
}

// newStackOn is newStack over the migrated database of pool.
func newStackOn(t *testing.T, pool *pgxpool.Pool) *stack {
	t.Helper()
	s, store, index := newEmptyStackOn(t, pool)
	imported, err := (commands.ImportCatalog{Store: store, Clock: s.clock.Now}).Handle(ctx, strings.NewReader(catalogNDJSON(t)), eventstore.Metadata{})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	events := readImported(t, s.pool, imported.Towns+imported.Places+imported.Events)
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return projections.Catalog{Clock: s.clock.Now}.Apply(ctx, tx, events)
	}); err != nil {
		t.Fatalf("project catalog: %v", err)
	}
	docs, err := projections.PlaceDocsFromEvents(events)
	if err != nil {
		t.Fatal(err)
	}
	if err := index.Upsert(ctx, docs, nil, "test"); err != nil {
		t.Fatal(err)
	}
	return s
}

// newEmptyStack is a read API with its meter over a new database and an empty embedded index,
// with no catalog yet.
func newEmptyStack(t *testing.T) (*stack, *eventstore.Store, *bleveindex.Index) {
	t.Helper()
	return newEmptyStackOn(t, pgtest.NewPool(t))
}

// newEmptyStackOn is newEmptyStack over the migrated database of pool.
func newEmptyStackOn(t *testing.T, pool *pgxpool.Pool) (*stack, *eventstore.Store, *bleveindex.Index) {
	t.Helper()
	store := eventstore.New(pool)
	clk := &clock{now: start}
	meter := commands.NewMeter(store, clk.Now, commands.MeterOptions{})
	t.Cleanup(meter.Close)
	s := &stack{
		t: t, pool: pool, clock: clk, log: &bytes.Buffer{},
		accounts: commands.Accounts{Store: store, Clock: clk.Now, KeysChanged: meter.Keys().Forget},
		meter:    meter,
	}
	index, err := bleveindex.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = index.Close() })
	logger := logrus.New()
	logger.SetOutput(&lockedWriter{w: s.log})
	logger.SetFormatter(&logrus.JSONFormatter{})
	srv := &readapi.Server{
		Meter: s.meter, Pool: pool, Index: index, Clock: clk.Now,
		CanonicalBaseURL: baseURL, Log: logger,
	}
	s.api = *srv
	s.server = httptest.NewServer(srv.Handler())
	t.Cleanup(s.server.Close)
	return s, store, index
}

// listenForKeys runs the meter's key-change listener, as a serving process does, until the
// test ends: keys are then served from the cache, which notifications keep current.
func (s *stack) listenForKeys() {
	s.t.Helper()
	listenCtx, stop := context.WithCancel(ctx)
	s.t.Cleanup(stop)
	go s.meter.Keys().Listen(listenCtx, nil)
	for deadline := time.Now().Add(30 * time.Second); !s.meter.Keys().Listening(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Fatal("the key listener did not connect")
		}
	}
}

// withLimiter is another read API server over the same database, index and clock, counting
// requests with l: a second process, as far as rate limits go.
func (s *stack) withLimiter(l ratelimit.Limiter) *stack {
	s.t.Helper()
	other := *s
	other.api.Limiter = l
	other.server = httptest.NewServer(other.api.Handler())
	s.t.Cleanup(other.server.Close)
	return &other
}

// readImported reads the catalog events. ReadAll holds back events while any older
// transaction of the (shared) server is still open, so it waits until all n are visible.
func readImported(t *testing.T, pool *pgxpool.Pool, n int) []eventstore.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, err := eventstore.ReadAll(ctx, pool, eventstore.Position{}, 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) >= n {
			return events
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d imported events became visible", len(events), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// customer opens an account, issues a key and buys credits: $5 gives 1000.
func (s *stack) customer(cents int64) (accountID, key string) {
	s.t.Helper()
	id, err := s.accounts.OpenAccount(ctx, "Test Co", "ops@test.example", eventstore.Metadata{})
	if err != nil {
		s.t.Fatal(err)
	}
	k, err := s.accounts.IssueKey(ctx, id, eventstore.Metadata{})
	if err != nil {
		s.t.Fatal(err)
	}
	if cents > 0 {
		if _, err := s.accounts.Purchase(ctx, id, cents, "pay-"+id, eventstore.Metadata{}); err != nil {
			s.t.Fatal(err)
		}
	}
	return id, k.APIKey
}

// customerWithBalance is a customer whose balance was spent down to exactly balance, by a
// per-row charge for places that are not in the catalog.
func (s *stack) customerWithBalance(balance int64) (accountID, key string) {
	s.t.Helper()
	id, key := s.customer(500)
	spend := 1000 - balance
	resources := make([]string, spend)
	for i := range resources {
		resources[i] = domain.PlaceResource(fmt.Sprintf("spent-%d", i))
	}
	c, err := s.meter.Authenticate(ctx, domain.HashKey(key))
	if err != nil {
		s.t.Fatal(err)
	}
	res, err := s.meter.Charge(ctx, commands.ChargeRequest{Caller: c, Operation: domain.OpPlaceList, Resources: resources})
	if err != nil || res.Balance != balance {
		s.t.Fatalf("spend down to %d: balance %d, %v", balance, res.Balance, err)
	}
	return id, key
}

func (s *stack) balance(accountID string) int64 {
	s.t.Helper()
	var b int64
	if err := s.pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE account_id = $1`, accountID).Scan(&b); err != nil {
		s.t.Fatal(err)
	}
	return b
}

// response is an answer of the read API, already checked against the OpenAPI document.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// get requests path with key (none when ""), and validates the response against the
// OpenAPI document.
func (s *stack) get(key, path string) response {
	s.t.Helper()
	return s.do(http.MethodGet, key, path, true)
}

// unchecked requests path without validating the answer: for paths the OpenAPI document does
// not describe.
func (s *stack) unchecked(method, key, path string) response {
	s.t.Helper()
	return s.do(method, key, path, false)
}

// checked requests path with method and key (none when ""), sending body (none when nil), and
// validates the response against the OpenAPI document.
func (s *stack) checked(method, key, path string, body io.Reader) response {
	s.t.Helper()
	return s.send(method, key, path, body, true)
}

func (s *stack) do(method, key, path string, validate bool) response {
	s.t.Helper()
	return s.send(method, key, path, nil, validate)
}

func (s *stack) send(method, key, path string, reqBody io.Reader, validate bool) response {
	s.t.Helper()
	req, err := http.NewRequest(method, s.server.URL+path, reqBody)
	if err != nil {
		s.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		s.t.Fatal(err)
	}
	if validate {
		openapitest.New(s.t).Check(s.t, req, resp, body)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// meta is the envelope's meta as a client reads it.
type meta struct {
	CreditsUsed       int64 `json:"credits_used"`
	CreditsRemaining  int64 `json:"credits_remaining"`
	Count             *int  `json:"count"`
	Deduplicated      *bool `json:"deduplicated"`
	DeduplicatedCount *int  `json:"deduplicated_count"`
	Partial           *bool `json:"partial"`
	OmittedUnpaid     *int  `json:"omitted_unpaid"`
}

// rows decodes a list answer: its rows as objects, and meta.
func (r response) rows(t *testing.T) ([]map[string]any, meta) {
	t.Helper()
	var env struct {
		Data []map[string]any `json:"data"`
		Meta meta             `json:"meta"`
	}
	r.decode(t, &env)
	return env.Data, env.Meta
}

// object decodes an object answer.
func (r response) object(t *testing.T) (map[string]any, meta) {
	t.Helper()
	var env struct {
		Data map[string]any `json:"data"`
		Meta meta           `json:"meta"`
	}
	r.decode(t, &env)
	return env.Data, env.Meta
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", r.Status, r.Body)
	}
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// expectError checks an error answer's status and code.
func (r response) expectError(t *testing.T, status int, code string) {
	t.Helper()
	var body struct {
		Error string  `json:"error"`
		Code  *string `json:"code"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("error body %s: %v", r.Body, err)
	}
	if r.Status != status || body.Code == nil || *body.Code != code || body.Error == "" {
		t.Fatalf("got %d %s, want %d with code %q", r.Status, r.Body, status, code)
	}
}

func ids(rows []map[string]any) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i], _ = r["place_id"].(string)
	}
	return out
}

func idsOf(rows []map[string]any, field string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i], _ = r[field].(string)
	}
	return out
}
