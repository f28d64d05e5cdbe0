package readapi_test

// The edges of a request as sent: how paths reach the routes, query strings that do not parse
// or repeat a parameter, lengths, and answers given before any route (the header limit), each
// checked against the OpenAPI document.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/kyapi/kyapi/internal/app"
	"github.com/kyapi/kyapi/openapi"
	"github.com/kyapi/kyapi/openapi/openapitest"
)

// A place id whose percent-encoded form holds a slash is one id (RFC 3986: %2F is data, not a
// separator). Routed after decoding, "lex-bourbon-bar%2Fmenu" was the menu of lex-bourbon-bar,
// charged 3 credits, where the client asked for the detail of an id no place has (404, free).
func TestAnEncodedSlashStaysInThePlaceID(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	for _, p := range []string{
		"/api/data/places/lex-bourbon-bar%2Fmenu",
		"/api/data/places/lex-bourbon-bar%2Freviews",
	} {
		r := s.unchecked(http.MethodGet, key, p)
		if r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), `"not_found"`) {
			t.Errorf("GET %s: %d %.120s; want 404 not_found (no place has that id)", p, r.Status, r.Body)
		}
	}
	if b := s.balance(account); b != 1000 {
		t.Errorf("balance %d after asking for places that do not exist, want 1000 (charged %d)", b, 1000-b)
	}
}

// A path that is not clean is not redirected to its cleaned form before authentication (a 301
// with no body, in no operation of the OpenAPI document): an encoded "../" in a place id was
// cleaned away and the redirect pointed at another place, which a client that follows
// redirects (Go's does, keeping the Authorization header) was charged for. It is an
// authenticated 404.
func TestAPathThatIsNotCleanIsAnAuthenticated404NotARedirect(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{"/api/data//towns", "/api/data/./trending", "/api/data/places/x/../lex-coffee"} {
		req, err := http.NewRequest(http.MethodGet, s.server.URL+p, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a key: %d (Location %q, Content-Type %q, body %q); want 401 missing_api_key like any other request",
				p, resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("Content-Type"), body)
		}
	}

	// With a key and an ordinary client: the detail of "nosuch/../lex-coffee" (no such place).
	r := s.unchecked(http.MethodGet, key, "/api/data/places/nosuch%2F..%2Flex-coffee")
	if r.Status != http.StatusNotFound {
		t.Errorf("GET /api/data/places/nosuch%%2F..%%2Flex-coffee: %d %.100s; want 404 not_found", r.Status, r.Body)
	}
	if b := s.balance(account); b != 1000 {
		t.Errorf("balance %d, want 1000: charged %d credit(s) for place lex-coffee, which the request never named", b, 1000-b)
	}
}

// A query string that does not parse (a pair with ';' or a broken %-escape) is a 400 naming
// the parameter: url.Values drops such a pair silently, and a filter dropped was an unfiltered,
// paid answer (q=zzzznomatch;x listed and charged the first page of the catalog).
func TestAQueryStringThatDoesNotParseIs400AndFree(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	// Each filter alone matches nothing (checked below), so any row served, or any credit
	// charged, comes from the filter having been dropped.
	for _, c := range []struct{ path, param string }{
		{"/api/data/places?q=zzzznomatch;x", "q"},
		{"/api/data/places?q=zzzznomatch%", "q"},
		{"/api/data/places?town=nowhere%zz&limit=5", "town"},
		{"/api/data/hidden-gems?town=nowhere%zz", "town"},
		{"/api/data/events?from=2030-01-01;&to=2030-01-02", "from"},
	} {
		before := s.balance(account)
		r := s.unchecked(http.MethodGet, key, c.path)
		charged := before - s.balance(account)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), c.param) || charged != 0 {
			t.Errorf("GET %s: %d, %d credits charged, %.90s...; want 400 bad_request naming %q, nothing charged",
				c.path, r.Status, charged, r.Body, c.param)
		}
	}
	// The same filters, well formed, match nothing and cost nothing.
	for _, p := range []string{"/api/data/places?q=zzzznomatch", "/api/data/places?town=nowhere", "/api/data/hidden-gems?town=nowhere"} {
		if rows, _ := s.get(key, p).rows(t); len(rows) != 0 {
			t.Fatalf("%s: %d rows; the test assumes none", p, len(rows))
		}
	}
}

// A parameter given twice is a 400 naming it, not read from its first occurrence:
// ?q=&q=coffee listed (and charged) the catalog as if no q had been given.
func TestAParameterGivenTwiceIs400AndFree(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	for _, c := range []struct{ path, param string }{
		{"/api/data/places?q=&q=coffee", "q"},
		{"/api/data/places?town=paducah&limit=5&town=lexington", "town"},
		{"/api/data/search?lat=38&lng=-84.5&lat=37", "lat"},
		{"/api/data/events?from=2030-01-01&from=2030-02-01", "from"},
	} {
		r := s.get(key, c.path)
		r.expectError(t, http.StatusBadRequest, "bad_request")
		var e struct{ Error string }
		_ = json.Unmarshal(r.Body, &e)
		if !strings.Contains(e.Error, strconv.Quote(c.param)+" is given 2 times") {
			t.Errorf("%s: %s; want the error to name %s", c.path, r.Body, c.param)
		}
	}
	if b := s.balance(account); b != 1000 {
		t.Errorf("balance %d, want 1000: nothing charged", b)
	}
}

// The parameters' maximum lengths count characters, as the OpenAPI document's maxLength does:
// a q of 150 "é" (300 bytes) is valid by the document, and was refused as over 200 bytes.
func TestParameterLengthsCountCharactersAsTheDocumentDoes(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	doc, err := libopenapi.NewDocument(openapi.Document())
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	valid := func(path string) bool {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		ok, _ := v.ValidateHttpRequest(req)
		return ok
	}
	// The validator does enforce maxLength: 201 ASCII characters are refused.
	if valid("/api/data/places?q=" + strings.Repeat("a", 201)) {
		t.Fatal("the request validator does not check maxLength; the test proves nothing")
	}
	for _, path := range []string{
		"/api/data/places?q=" + url.QueryEscape(strings.Repeat("é", 150)),
		"/api/data/places?town=" + url.QueryEscape(strings.Repeat("é", 60)),
		"/api/data/events?town=" + url.QueryEscape(strings.Repeat("é", 60)),
	} {
		if !valid(path) {
			t.Fatalf("%.60s...: the document itself refuses it; the test proves nothing", path)
		}
		if r := s.unchecked(http.MethodGet, key, path); r.Status == http.StatusBadRequest {
			t.Errorf("%.40s... (valid by the document's maxLength, in characters): %d %s", path, r.Status, r.Body)
		}
	}
}

// The read handler as served (app.NewHTTPServer) answers a request line and headers over 16 KiB
// with 431 (docs/limits.md); the OpenAPI document describes that answer too.
func TestTheHeaderLimitAnswerIsInTheDocument(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	ts := httptest.NewServer(app.NewHTTPServer(s.api.Handler(), nil, s.api.Log).Handler)
	defer ts.Close()
	req, err := http.NewRequest(http.MethodGet, ts.URL+"/api/data/places?q="+strings.Repeat("a", 17<<10), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want the 431 docs/limits.md describes", resp.StatusCode)
	}
	openapitest.New(t).Check(t, req, resp, body)
}

// OPTIONS * (a request for the server itself, not for a path) needs a key like any other
// request but the two keyless routes: net/http's own answer to it, 200 to anyone, is off.
func TestOptionsStarIsAuthenticatedLikeAnyOtherRequest(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = app.NewHTTPServer(s.api.Handler(), nil, s.api.Log)
	ts.Start()
	defer ts.Close()
	for _, c := range []struct {
		auth   string
		status int
		code   string
	}{{"", http.StatusUnauthorized, "missing_api_key"}, {"Authorization: Bearer " + key + "\r\n", http.StatusNotFound, "not_found"}} {
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "OPTIONS * HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", c.auth)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		_ = conn.Close()
		var e struct{ Error, Code string }
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || e.Code != c.code {
			t.Errorf("OPTIONS * (key given: %v): %d %q; want %d %s", c.auth != "", resp.StatusCode, body, c.status, c.code)
		}
	}
}

// An unknown route or a wrong method is 404 or 405 whatever its query string: no route reads
// it, so one that does not parse is not a 400 about a parameter nothing reads. Nor is it on a
// route that reads no parameter.
func TestAnUnknownRouteOrMethodIgnoresItsQueryString(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	s.unchecked(http.MethodGet, key, "/api/data/nothing-here?x=50%off").expectError(t, http.StatusNotFound, "not_found")
	s.unchecked(http.MethodGet, key, "/api/data/nothing-here?a=1;b=2").expectError(t, http.StatusNotFound, "not_found")
	r := s.unchecked(http.MethodPost, key, "/api/data/towns?x=50%off")
	r.expectError(t, http.StatusMethodNotAllowed, "bad_request")
	if r := s.unchecked(http.MethodPost, key, "/healthz"); r.Header.Get("Allow") != "GET, HEAD" || !strings.Contains(string(r.Body), "allowed: GET, HEAD") {
		t.Errorf("405 on /healthz: Allow %q, body %s; want GET, HEAD in both", r.Header.Get("Allow"), r.Body)
	}
	if r := s.get(key, "/api/data/places/lex-bourbon-bar?x=50%off"); r.Status != http.StatusOK {
		t.Errorf("detail with a query it does not read: %d %s", r.Status, r.Body)
	}
}

// documentedPath is a path of the OpenAPI document, as a request names it ({placeId} filled
// in), and whether it is served without a key.
type documentedPath struct {
	path    string
	keyless bool
}

// documentedPaths lists every path of the OpenAPI document.
func documentedPaths(t *testing.T) []documentedPath {
	t.Helper()
	var doc struct {
		Paths map[string]struct {
			Get struct {
				Security []map[string][]string `json:"security"`
			} `json:"get"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	var out []documentedPath
	for _, p := range slices.Sorted(maps.Keys(doc.Paths)) {
		out = append(out, documentedPath{
			path:    strings.ReplaceAll(p, "{placeId}", "lex-coffee"),
			keyless: len(doc.Paths[p].Get.Security) == 0,
		})
	}
	if len(out) < 12 {
		t.Fatalf("the document has %d paths; the test expects the read API's 12", len(out))
	}
	return out
}

// Every path answers a method it does not take with 405 (code bad_request) and an Allow header
// naming those it takes, after authentication (a key is needed even where GET needs none), as
// the OpenAPI document's introduction and its MethodNotAllowed response say. (Such methods are
// not operations of the document: a client generated from it would get calls that only fail.)
func TestAMethodAPathDoesNotTakeIs405WithAllow(t *testing.T) {
	s := newStack(t)
	for _, p := range documentedPaths(t) {
		_, key := s.customer(0) // a key per path: all the requests are more than one key's minute
		allow := "GET"
		methods := []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions, http.MethodTrace}
		if p.keyless {
			allow = "GET, HEAD"
		} else {
			methods = append(methods, http.MethodHead)
		}
		for _, m := range methods {
			r := s.send(m, key, p.path, nil, false)
			if m == http.MethodHead {
				if r.Status != http.StatusMethodNotAllowed {
					t.Errorf("HEAD %s: %d, want 405", p.path, r.Status)
				}
			} else {
				r.expectError(t, http.StatusMethodNotAllowed, "bad_request")
			}
			if got := r.Header.Get("Allow"); got != allow {
				t.Errorf("%s %s: Allow %q, want %q", m, p.path, got, allow)
			}
		}
		s.send(http.MethodPost, "", p.path, nil, false).expectError(t, http.StatusUnauthorized, "missing_api_key")
		// The body is read and dropped before the method is looked at.
		s.send(http.MethodPost, key, p.path, strings.NewReader(strings.Repeat("x", 65<<10)), false).
			expectError(t, http.StatusRequestEntityTooLarge, "bad_request")
	}
}

// The access log's resource_id is the place id served and charged, decoded: the router reads
// the path as sent.
func TestTheAccessLogNamesThePlaceServedNotItsEncoding(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	if r := s.get(key, "/api/data/places/lex%2Dbourbon-bar"); r.Status != 200 {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	log := s.log.String()
	if !strings.Contains(log, `"resource_id":"lex-bourbon-bar"`) {
		t.Fatalf("log names the place served as lex-bourbon-bar otherwise: %s", log)
	}
}
