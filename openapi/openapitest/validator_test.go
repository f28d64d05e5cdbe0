package openapitest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/openapi/openapitest"
)

// recordingTB captures failures so a test can assert that Check reported one.
type recordingTB struct {
	testing.TB
	failures []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
	r.TB.FailNow()
}

const placeDetail = `{
  "data": {
    "place_id": "pl_123",
    "name": "Keeneland Café",
    "category": "food.restaurant",
    "address": "4201 Versailles Rd, Lexington, KY",
    "town_slug": "lexington-fayette-urban-county",
    "latitude": 38.05,
    "longitude": -84.6,
    "is_gem": true,
    "local_gem_score": 0.82,
    "phone": null,
    "website": "https://example.com/keeneland",
    "rating": 4.6,
    "rating_count": 812,
    "seo_description": null,
    "canonical_url": "https://kyapi.example/places/pl_123",
    "field_trust": {
      "phone": null,
      "website": {"value": "https://example.com/keeneland", "trustTier": "verified", "sourceCount": 3, "lastVerifiedAt": "2025-05-01T12:00:00Z"},
      "rating": {"value": 4.6, "trustTier": null, "sourceCount": null, "lastVerifiedAt": null}
    },
    "hours": {"mon": [{"open": "07:00", "close": "15:00"}], "sun": []},
    "description": null,
    "enrichment_tier": "enhanced",
    "some_future_field": "clients must tolerate additions"
  },
  "meta": {"credits_used": 1, "credits_remaining": 99, "deduplicated": false}
}`

const notFound = `{"error": "place not found", "code": "not_found"}`

func meteredHeaders() http.Header {
	return http.Header{
		"Content-Type":          {"application/json; charset=utf-8"},
		"X-Credits-Remaining":   {"99"},
		"X-Request-Id":          {"req_abc"},
		"X-Ratelimit-Limit":     {"60"},
		"X-Ratelimit-Remaining": {"59"},
		"X-Ratelimit-Reset":     {"1767225600"},
		"Ratelimit-Policy":      {`"default";q=60;w=60`},
		"Ratelimit":             {`"default";r=59;t=42`},
	}
}

// exchange builds a request and the response a server would give it.
func exchange(target string, status int, header http.Header, body string) (*http.Request, *http.Response) {
	req := httptest.NewRequest(http.MethodGet, target, nil)
	rec := httptest.NewRecorder()
	for k, vs := range header {
		for _, v := range vs {
			rec.Header().Add(k, v)
		}
	}
	rec.WriteHeader(status)
	_, _ = io.WriteString(rec, body)
	return req, rec.Result()
}

// mutate applies edit to the decoded JSON of body and re-encodes it.
func mutate(t *testing.T, body string, edit func(m map[string]any)) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func data(m map[string]any) map[string]any { return m["data"].(map[string]any) }

func TestCheckAcceptsAConformingPlaceDetail(t *testing.T) {
	v := openapitest.New(t)
	req, resp := exchange("http://kyapi.test/api/data/places/pl_123", http.StatusOK, meteredHeaders(), placeDetail)
	body, _ := io.ReadAll(resp.Body)

	rec := &recordingTB{TB: t}
	v.Check(rec, req, resp, body)
	if len(rec.failures) > 0 {
		t.Fatalf("conforming response was rejected:\n%s", strings.Join(rec.failures, "\n"))
	}
	again, _ := io.ReadAll(resp.Body)
	if string(again) != string(body) {
		t.Error("resp.Body was not restored after Check")
	}
}

func TestCheckReadsAndRestoresTheBodyWhenNoneIsGiven(t *testing.T) {
	v := openapitest.New(t)
	req, resp := exchange("/api/data/places/pl_123", http.StatusOK, meteredHeaders(), placeDetail)

	rec := &recordingTB{TB: t}
	v.Check(rec, req, resp, nil)
	if len(rec.failures) > 0 {
		t.Fatalf("conforming response was rejected:\n%s", strings.Join(rec.failures, "\n"))
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != placeDetail {
		t.Errorf("resp.Body after Check = %q, want the original body", body)
	}
}

func TestCheckAcceptsConformingResponsesOfOtherOperations(t *testing.T) {
	rateHeaders := http.Header{
		"Content-Type":          {"application/json"},
		"X-Request-Id":          {"req_abc"},
		"X-Ratelimit-Limit":     {"60"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {"1767225600"},
		"Ratelimit-Policy":      {`"default";q=60;w=60`},
		"Ratelimit":             {`"default";r=0;t=12`},
	}
	tooMany := rateHeaders.Clone()
	tooMany.Set("Retry-After", "12")
	jsonOnly := http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"req_abc"}}
	challenged := jsonOnly.Clone()
	challenged.Set("WWW-Authenticate", `Bearer realm="kyapi"`)

	cases := []struct {
		name   string
		target string
		status int
		header http.Header
		body   string
	}{
		{"search rows carry distance_km and a partial list", "/api/data/search?lat=38.2&lng=-85.7", 200, meteredHeaders(),
			`{"data":[{"place_id":"p1","name":"A","category":"food","canonical_url":"https://x.test/places/p1","town_slug":null,"distance_km":0.4}],
			  "meta":{"credits_used":1,"credits_remaining":0,"count":1,"partial":true,"omitted_unpaid":3,"deduplicated_count":0}}`},
		{"events", "/api/data/events?town=berea", 200, meteredHeaders(),
			`{"data":[{"event_id":"e1","title":"Fair","event_type":"festival","start_date":"2026-06-01T10:00:00Z","end_date":null,"town_slug":"berea","venue_place_id":null}],
			  "meta":{"credits_used":0,"credits_remaining":10,"deduplicated":true}}`},
		{"towns", "/api/data/towns", 200, meteredHeaders(),
			`{"data":[{"slug":"berea","name":"Berea","county":"Madison","population":null}],"meta":{"credits_used":10,"credits_remaining":0}}`},
		{"reviews", "/api/data/places/p1/reviews", 200, meteredHeaders(),
			`{"data":{"place_id":"p1","headline":"Loved","summary":"Good.","confidence":0.9,"review_count":12,"generated_at":"2026-01-02T03:04:05Z"},"meta":{"credits_used":2,"credits_remaining":8}}`},
		{"detail with unknown hours and empty field trust", "/api/data/places/pl_123", 200, meteredHeaders(),
			mutate(t, placeDetail, func(m map[string]any) {
				data(m)["hours"] = nil
				data(m)["field_trust"] = map[string]any{}
			})},
		{"missing key", "/api/data/towns", 401, challenged, `{"error":"missing API key","code":"missing_api_key"}`},
		{"rate limited", "/api/data/trending", 429, tooMany, `{"error":"slow down","code":"rate_limited"}`},
		{"healthz", "/healthz", 200, jsonOnly, `{"status":"ok"}`},
	}
	v := openapitest.New(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, resp := exchange(c.target, c.status, c.header, c.body)
			rec := &recordingTB{TB: t}
			v.Check(rec, req, resp, nil)
			if len(rec.failures) > 0 {
				t.Errorf("conforming response was rejected:\n%s", strings.Join(rec.failures, "\n"))
			}
		})
	}
}

func TestCheckReportsNonConformingResponses(t *testing.T) {
	noCredits := meteredHeaders()
	noCredits.Del("X-Credits-Remaining")
	noRetryAfter := http.Header{
		"Content-Type":          {"application/json"},
		"X-Ratelimit-Limit":     {"60"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {"1767225600"},
		"Ratelimit-Policy":      {`"default";q=60;w=60`},
		"Ratelimit":             {`"default";r=0;t=12`},
	}
	badCredits := meteredHeaders()
	badCredits.Set("X-Credits-Remaining", "lots")
	noIETF := meteredHeaders()
	noIETF.Del("RateLimit")
	badIETF := meteredHeaders()
	badIETF.Set("RateLimit-Policy", "60;w=60")

	cases := []struct {
		name   string
		target string
		status int
		header http.Header
		body   string
		want   string // a fragment the report must contain, in any case
	}{
		{"place detail without name", "/api/data/places/pl_123", 200, meteredHeaders(),
			mutate(t, placeDetail, func(m map[string]any) { delete(data(m), "name") }), "missing property 'name'"},
		{"credits_used as a string", "/api/data/places/pl_123", 200, meteredHeaders(),
			mutate(t, placeDetail, func(m map[string]any) { m["meta"].(map[string]any)["credits_used"] = "1" }), "credits_used"},
		{"error body without error", "/api/data/places/pl_404", 404, meteredHeaders(),
			`{"code":"not_found"}`, "missing property 'error'"},
		{"detail without enrichment_tier", "/api/data/places/pl_123", 200, meteredHeaders(),
			mutate(t, placeDetail, func(m map[string]any) { delete(data(m), "enrichment_tier") }), "missing property 'enrichment_tier'"},
		{"trust tier outside its enum", "/api/data/places/pl_123", 200, meteredHeaders(),
			mutate(t, placeDetail, func(m map[string]any) {
				data(m)["field_trust"] = map[string]any{"name": map[string]any{"value": "x", "trustTier": "great", "sourceCount": 1, "lastVerifiedAt": nil}}
			}), "trustTier"},
		{"hours not HH:MM", "/api/data/places/pl_123", 200, meteredHeaders(),
			mutate(t, placeDetail, func(m map[string]any) {
				data(m)["hours"] = map[string]any{"mon": []any{map[string]any{"open": "7am", "close": "15:00"}}}
			}), "open"},
		{"event start_date not a date-time", "/api/data/events", 200, meteredHeaders(),
			`{"data":[{"event_id":"e1","title":"Fair","event_type":"festival","start_date":"June 1","end_date":null,"town_slug":null,"venue_place_id":null}],"meta":{"credits_used":5,"credits_remaining":0}}`,
			"start_date"},
		{"metered 200 without X-Credits-Remaining", "/api/data/places/pl_123", 200, noCredits, placeDetail, "X-Credits-Remaining"},
		{"429 without Retry-After", "/api/data/towns", 429, noRetryAfter, `{"error":"slow down","code":"rate_limited"}`, "Retry-After"},
		{"X-Credits-Remaining not an integer", "/api/data/places/pl_123", 200, badCredits, placeDetail, "x-credits-remaining"},
		{"200 without the IETF RateLimit field", "/api/data/places/pl_123", 200, noIETF, placeDetail, "RateLimit"},
		{"RateLimit-Policy not a structured field", "/api/data/places/pl_123", 200, badIETF, placeDetail, "ratelimit-policy"},
		{"path the document does not describe", "/api/data/nowhere", 200, meteredHeaders(), `{}`, "/api/data/nowhere"},
		{"status the operation does not declare", "/api/data/towns", 404, meteredHeaders(), notFound, "404"},
		{"unknown error code", "/api/data/places/pl_404", 404, meteredHeaders(), `{"error":"nope","code":"gone"}`, "code"},
	}
	v := openapitest.New(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, resp := exchange(c.target, c.status, c.header, c.body)
			rec := &recordingTB{TB: t}
			v.Check(rec, req, resp, nil)
			if len(rec.failures) == 0 {
				t.Fatalf("non-conforming response was not reported; body: %s", c.body)
			}
			if report := strings.Join(rec.failures, "\n"); !strings.Contains(strings.ToLower(report), strings.ToLower(c.want)) {
				t.Errorf("report does not mention %q:\n%s", c.want, report)
			}
		})
	}
}
