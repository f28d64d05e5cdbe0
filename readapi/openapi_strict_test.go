package readapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/openapi"
	"github.com/kyapi/kyapi/openapi/openapitest"
)

// strictDoc reads real answers against the OpenAPI document as a closed world: where
// openapitest checks that an answer is allowed, it checks that the document says everything the
// answer holds (every property of every object, every header of the API's own) and that what
// the document requires is there.
type strictDoc struct {
	root map[string]any
}

func newStrictDoc(t *testing.T) strictDoc {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal(openapi.Document(), &root); err != nil {
		t.Fatal(err)
	}
	return strictDoc{root: root}
}

// apiHeaders are the response headers the API itself sets; each one an answer carries must be
// declared for it.
var apiHeaders = []string{"X-Credits-Remaining", "X-Request-Id", "X-RateLimit-Limit", "X-RateLimit-Remaining",
	"X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After", "X-Charge-Outcome", "Allow", "WWW-Authenticate"}

func (d strictDoc) resolve(v any) map[string]any {
	m, _ := v.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		m = d.root
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			m, _ = m[part].(map[string]any)
		}
	}
	return m
}

// operation finds the document's operation for method and a path as served.
func (d strictDoc) operation(method, path string) (string, map[string]any) {
	paths := d.root["paths"].(map[string]any)
	segs := strings.Split(path, "/")
	for tpl, item := range paths {
		ts := strings.Split(tpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		match := true
		for i := range ts {
			if !strings.HasPrefix(ts[i], "{") && ts[i] != segs[i] {
				match = false
				break
			}
		}
		if match {
			op, _ := item.(map[string]any)[strings.ToLower(method)].(map[string]any)
			return tpl, op
		}
	}
	return "", nil
}

// check returns every way the answer r to method path is not what the document says.
func (d strictDoc) check(method, path string, r response) []string {
	var problems []string
	tpl, op := d.operation(method, path)
	if op == nil {
		return []string{fmt.Sprintf("%s %s: no operation in the document", method, path)}
	}
	where := fmt.Sprintf("%s %s -> %d", method, tpl, r.Status)
	res := d.resolve(op["responses"].(map[string]any)[strconv.Itoa(r.Status)])
	if res == nil {
		return []string{where + ": status not declared"}
	}
	headers, _ := res["headers"].(map[string]any)
	declared := map[string]map[string]any{}
	for name, h := range headers {
		declared[http.CanonicalHeaderKey(name)] = d.resolve(h)
	}
	for _, name := range apiHeaders {
		h, ok := declared[http.CanonicalHeaderKey(name)]
		present := r.Header.Get(name) != ""
		switch {
		case present && !ok:
			problems = append(problems, fmt.Sprintf("%s: header %s (%q) not declared", where, name, r.Header.Get(name)))
		case !present && ok && h["required"] == true:
			problems = append(problems, fmt.Sprintf("%s: required header %s missing", where, name))
		}
	}
	content, _ := res["content"].(map[string]any)
	if method == http.MethodHead {
		return problems
	}
	mt, _ := content["application/json"].(map[string]any)
	if mt == nil {
		if len(r.Body) > 0 {
			problems = append(problems, fmt.Sprintf("%s: a body, but no content declared", where))
		}
		return problems
	}
	var body any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return append(problems, fmt.Sprintf("%s: body is not JSON: %v", where, err))
	}
	for _, p := range d.value(mt["schema"], body, "") {
		problems = append(problems, where+": "+p)
	}
	return problems
}

// jsonType is the JSON Schema type of v ("integer" for a whole number).
func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		if x == float64(int64(x)) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "?"
}

// value checks v against schema s, closed: an object property s does not declare is a problem.
func (d strictDoc) value(s any, v any, at string) []string {
	schema := d.resolve(s)
	if schema == nil {
		return nil
	}
	if branches, ok := schema["anyOf"].([]any); ok {
		var all []string
		for _, b := range branches {
			p := d.value(b, v, at)
			if len(p) == 0 {
				return nil
			}
			all = append(all, p...)
		}
		return append([]string{at + ": matches no anyOf branch"}, all...)
	}
	var problems []string
	// allOf: every part holds, and the object's properties are those of all parts.
	props := map[string]any{}
	var additional any
	var required []any
	parts := []map[string]any{schema}
	if all, ok := schema["allOf"].([]any); ok {
		for _, p := range all {
			parts = append(parts, d.resolve(p))
		}
	}
	var types []string
	for _, p := range parts {
		for k, ps := range mapOf(p["properties"]) {
			props[k] = ps
		}
		if a, ok := p["additionalProperties"]; ok {
			additional = a
		}
		if r, ok := p["required"].([]any); ok {
			required = append(required, r...)
		}
		switch ty := p["type"].(type) {
		case string:
			types = append(types, ty)
		case []any:
			for _, x := range ty {
				types = append(types, x.(string))
			}
		}
		if enum, ok := p["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) && jsonType(e) == jsonType(v) }) {
			problems = append(problems, fmt.Sprintf("%s: %v not in enum %v", at, v, enum))
		}
	}
	jt := jsonType(v)
	if len(types) > 0 && !slices.Contains(types, jt) && !(jt == "integer" && slices.Contains(types, "number")) {
		return append(problems, fmt.Sprintf("%s: %s, want %v", at, jt, types))
	}
	switch x := v.(type) {
	case map[string]any:
		for _, r := range required {
			if _, ok := x[r.(string)]; !ok {
				problems = append(problems, fmt.Sprintf("%s: required property %s missing", at, r))
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k]; ok {
				problems = append(problems, d.value(ps, x[k], at+"/"+k)...)
				continue
			}
			if a, ok := additional.(map[string]any); ok {
				problems = append(problems, d.value(a, x[k], at+"/"+k)...)
				continue
			}
			if additional == true || len(props) == 0 { // a schema naming no property leaves them open
				continue
			}
			problems = append(problems, fmt.Sprintf("%s: property %q not declared", at, k))
		}
	case []any:
		for i, it := range x {
			for _, p := range parts {
				if items, ok := p["items"]; ok {
					problems = append(problems, d.value(items, it, fmt.Sprintf("%s/%d", at, i))...)
				}
			}
		}
	}
	return problems
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// strictCase is one request and the status it must be answered with.
type strictCase struct {
	srv    string // base URL
	method string
	key    string
	path   string
	body   string
	want   int
}

// TestEveryAnswerOfEveryOperationIsWhatTheDocumentSays sends every operation the requests that
// give each of its answers (success, partial, each error) and reads each answer against the
// document, closed: every property and every header of the API's own that the answer holds is
// declared for it, and every status too.
func TestEveryAnswerOfEveryOperationIsWhatTheDocumentSays(t *testing.T) {
	s := newStack(t)
	doc := newStrictDoc(t)
	_, poor := s.customerWithBalance(0)
	account, _ := s.customer(500)
	revoked, err := s.accounts.IssueKey(ctx, account, eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.accounts.RevokeKey(ctx, account, revoked.KeyID, "test", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}

	// One request a minute: the second of a key is 429.
	limited := s.api
	limited.RateLimitPerMinute = 1
	lim := httptest.NewServer(limited.Handler())
	t.Cleanup(lim.Close)
	// An index that fails: 500.
	broken := s.api
	broken.Index = brokenIndex{}
	brk := httptest.NewServer(broken.Handler())
	t.Cleanup(brk.Close)
	// A database that cannot be reached: 503.
	down, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	downMeter := commands.NewMeter(eventstore.New(down), s.clock.Now, commands.MeterOptions{})
	t.Cleanup(downMeter.Close)
	unavailable := s.api
	unavailable.Pool, unavailable.Meter = down, downMeter
	dwn := httptest.NewServer(unavailable.Handler())
	t.Cleanup(dwn.Close)

	search := fmt.Sprintf("/api/data/search?lat=%v&lng=%v&radius=5", geoCenter.Lat, geoCenter.Lng)
	ops := []struct {
		path     string
		ok       []string // answered 200
		bad      []string // 400 for a parameter
		notFound []string
		perRow   bool
	}{
		{path: "/api/data/places", ok: []string{"/api/data/places", "/api/data/places?town=lexington&q=bourb&limit=3&offset=0", "/api/data/places?town=nowhere"},
			bad: []string{"/api/data/places?limit=0", "/api/data/places?limit=101", "/api/data/places?offset=10001", "/api/data/places?q=" + strings.Repeat("a", 201)}, perRow: true},
		{path: "/api/data/places/lex-bourbon-bar", ok: []string{"/api/data/places/lex-bourbon-bar", "/api/data/places/lex-coffee", "/api/data/places/lex-nocoords"},
			notFound: []string{"/api/data/places/nowhere", "/api/data/places/" + strings.Repeat("x", 129)}},
		{path: "/api/data/places/lex-bourbon-bar/menu", ok: []string{"/api/data/places/lex-bourbon-bar/menu"},
			notFound: []string{"/api/data/places/nowhere/menu", "/api/data/places/lex-bbq/menu"}},
		{path: "/api/data/places/lex-bourbon-bar/reviews", ok: []string{"/api/data/places/lex-bourbon-bar/reviews"},
			notFound: []string{"/api/data/places/nowhere/reviews", "/api/data/places/lex-bbq/reviews"}},
		{path: "/api/data/places/lex-bourbon-bar/related", ok: []string{"/api/data/places/lex-bourbon-bar/related", "/api/data/places/lex-nocoords/related"},
			notFound: []string{"/api/data/places/nowhere/related"}},
		{path: search, ok: []string{search, search + "&limit=2&offset=1", "/api/data/search?lat=0&lng=0"},
			bad: []string{"/api/data/search?lat=1", "/api/data/search?lat=91&lng=0", "/api/data/search?lat=1&lng=1&radius=0", "/api/data/search?lat=1&lng=1&radius=51"}, perRow: true},
		{path: "/api/data/trending", ok: []string{"/api/data/trending"}},
		{path: "/api/data/hidden-gems", ok: []string{"/api/data/hidden-gems", "/api/data/hidden-gems?town=lexington&limit=2"},
			bad: []string{"/api/data/hidden-gems?limit=51", "/api/data/hidden-gems?town=" + strings.Repeat("a", 129)}},
		{path: "/api/data/towns", ok: []string{"/api/data/towns"}},
		{path: "/api/data/events", ok: []string{"/api/data/events", "/api/data/events?town=lexington&from=2025-01-01&to=2025-12-31"},
			bad: []string{"/api/data/events?from=2025-02-30", "/api/data/events?from=2025-06-02&to=2025-06-01"}},
	}
	var cases []strictCase
	add := func(srv, key, path string, want int) {
		cases = append(cases, strictCase{srv: srv, method: http.MethodGet, key: key, path: path, want: want})
	}
	for _, op := range ops {
		_, key := s.customer(500) // each operation's own key: at most 60 requests a minute
		for _, p := range op.ok {
			add(s.server.URL, key, p, http.StatusOK)
			add(s.server.URL, key, p, http.StatusOK) // deduplicated
		}
		for _, p := range op.bad {
			add(s.server.URL, key, p, http.StatusBadRequest)
		}
		for _, p := range op.notFound {
			add(s.server.URL, key, p, http.StatusNotFound)
		}
		add(s.server.URL, "", op.path, http.StatusUnauthorized)
		add(s.server.URL, "svc_live_"+strings.Repeat("x", 40), op.path, http.StatusUnauthorized)
		add(s.server.URL, revoked.APIKey, op.path, http.StatusForbidden)
		add(s.server.URL, poor, op.path, http.StatusPaymentRequired)
		if op.perRow {
			_, one := s.customerWithBalance(1)
			add(s.server.URL, one, op.path, http.StatusOK) // partial
		}
		cases = append(cases, strictCase{srv: s.server.URL, method: http.MethodGet, key: key, path: op.path,
			body: strings.Repeat("x", 65<<10), want: http.StatusRequestEntityTooLarge})
		add(lim.URL, key, op.path, 0)
		add(lim.URL, key, op.path, http.StatusTooManyRequests)
		add(dwn.URL, key, op.path, http.StatusServiceUnavailable)
	}
	_, key := s.customer(500)
	for _, p := range []string{"/api/data/places", search, "/api/data/trending"} {
		add(brk.URL, key, p, http.StatusInternalServerError)
	}
	for _, p := range []string{"/healthz", "/openapi.json"} {
		add(s.server.URL, "", p, http.StatusOK)
		cases = append(cases, strictCase{srv: s.server.URL, method: http.MethodHead, path: p, want: http.StatusOK})
	}

	v := openapitest.New(t)
	seen := map[string]bool{}
	for _, c := range cases {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, c.srv+c.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if c.want != 0 && resp.StatusCode != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, resp.StatusCode, b, c.want)
			continue
		}
		v.Check(t, req, resp, b)
		for _, p := range doc.check(c.method, req.URL.Path, response{Status: resp.StatusCode, Header: resp.Header, Body: b}) {
			if !seen[p] {
				seen[p] = true
				t.Error(p)
			}
		}
	}
}

// TestParameterValuesAreJudgedAsTheDocumentSays sends parameter values at and around every
// bound and reads each request against the document's parameter schemas too: where the schema
// and the server judge a value differently (the server reads a query string in ways JSON
// Schema cannot say), the document's text says how the server judges it.
func TestParameterValuesAreJudgedAsTheDocumentSays(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(2500000)
	doc, err := libopenapi.NewDocument(openapi.Document())
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	text := string(openapi.Document())
	cases := []struct {
		query string
		says  string // where the schema and the server disagree: the document's words for it
	}{
		{"/api/data/places?limit=1", ""}, {"/api/data/places?limit=100", ""}, {"/api/data/places?limit=0", ""},
		{"/api/data/places?limit=101", ""}, {"/api/data/places?limit=abc", ""}, {"/api/data/places?limit=05", ""},
		{"/api/data/places?offset=0", ""}, {"/api/data/places?offset=10000", ""}, {"/api/data/places?offset=10001", ""},
		{"/api/data/places?offset=-1", ""},
		{"/api/data/places?limit=1e1", "`limit=1e1`"},
		{"/api/data/places?limit=10.0", "`limit=10.0`"},
		{"/api/data/places?limit=+5", "(`limit=%205` is 5)"},
		{"/api/data/places?limit=", "An empty or all-blank value counts as absent"},
		{"/api/data/places?limit=1&limit=2", "A listed parameter given twice"},
		{"/api/data/places?q=a;b", "a `;` separator"},
		{"/api/data/places?q=" + strings.Repeat("a", 200), ""}, {"/api/data/places?q=" + strings.Repeat("a", 201), ""},
		{"/api/data/places?town=" + strings.Repeat("a", 128), ""}, {"/api/data/places?town=" + strings.Repeat("a", 129), ""},
		{"/api/data/search?lat=1&lng=1", ""}, {"/api/data/search?lng=1", ""}, {"/api/data/search?lat=1", ""},
		{"/api/data/search?lat=90&lng=180", ""}, {"/api/data/search?lat=-90&lng=-180", ""},
		{"/api/data/search?lat=90.5&lng=1", ""}, {"/api/data/search?lat=1&lng=-180.5", ""},
		{"/api/data/search?lat=1e1&lng=1", ""}, {"/api/data/search?lat=.5&lng=5.", ""},
		{"/api/data/search?lat=NaN&lng=1", ""}, {"/api/data/search?lat=1&lng=Infinity", ""}, {"/api/data/search?lat=0x1p4&lng=1", ""},
		{"/api/data/search?lat=90.0000000000000001&lng=1", "`lat=90.0000000000000001` is 400"},
		{"/api/data/search?lat=1&lng=1&radius=50", ""}, {"/api/data/search?lat=1&lng=1&radius=50.5", ""},
		{"/api/data/search?lat=1&lng=1&radius=0", ""}, {"/api/data/search?lat=1&lng=1&radius=-1", ""},
		{"/api/data/search?lat=1&lng=1&radius=1e-400", "in range by their exact value"},
		{"/api/data/search?lat=1&lng=1&limit=100&offset=10000", ""}, {"/api/data/search?lat=1&lng=1&limit=101", ""},
		{"/api/data/hidden-gems?limit=1", ""}, {"/api/data/hidden-gems?limit=50", ""}, {"/api/data/hidden-gems?limit=51", ""},
		{"/api/data/hidden-gems?limit=0", ""}, {"/api/data/hidden-gems?town=lexington", ""},
		{"/api/data/events?from=2025-06-01&to=2025-06-30", ""}, {"/api/data/events?from=2024-02-29", ""},
		{"/api/data/events?from=2025-02-29", ""}, {"/api/data/events?from=2025-6-1", ""}, {"/api/data/events?to=20250630", ""},
		{"/api/data/events?from=2025-06-01T00:00:00Z", ""},
		{"/api/data/events?from=2025-06-02&to=2025-06-01", "`from` after `to`: 400"},
		{"/api/data/events?to=2025-01-01", "`from` after `to`: 400"}, // from defaults to today
		{"/api/data/events?from=%202025-06-01", "Blanks around a value are dropped"},
		{"/api/data/towns?limit=abc", ""}, {"/api/data/trending?x=%zz", ""},
	}
	for _, c := range cases {
		s.clock.Advance(time.Second) // 60 requests a minute
		r := s.get(key, c.query)
		req, err := http.NewRequest(http.MethodGet, s.server.URL+c.query, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		valid, verrs := v.ValidateHttpRequest(req)
		refused := r.Status == http.StatusBadRequest
		if r.Status != http.StatusOK && !refused {
			t.Errorf("%s: %d %s, want 200 or 400", c.query, r.Status, r.Body)
			continue
		}
		if valid != refused {
			if c.says != "" {
				t.Errorf("%s: the server and the schema agree (refused %v); the case says otherwise", c.query, refused)
			}
			continue
		}
		why := "the document accepts it"
		if !valid {
			why = "the document refuses it: " + verrs[0].Message
		}
		switch {
		case c.says == "":
			t.Errorf("%s: the server answers %d, but %s", c.query, r.Status, why)
		case !strings.Contains(text, c.says):
			t.Errorf("%s: the server answers %d, but %s, and the document does not say %q", c.query, r.Status, why, c.says)
		}
	}
}
