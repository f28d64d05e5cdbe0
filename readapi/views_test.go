package readapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// data is an answer's payload exactly as the server wrote it.
func (r response) data(t *testing.T) []byte {
	t.Helper()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	r.decode(t, &env)
	return env.Data
}

var placePaths = []string{
	"/api/data/places/lex-bourbon-bar",
	"/api/data/places/lex-bourbon-bar/menu",
	"/api/data/places/lex-bourbon-bar/reviews",
	"/api/data/places/lex-bourbon-bar/related",
	"/api/data/places?town=lexington&limit=100",
	"/api/data/places?q=repair",
	"/api/data/search?lat=37.0834&lng=-88.6&radius=5",
}

// With every stored document made unreadable, every place route still answers: the read
// API writes the views the catalog projection rendered and decodes no document.
func TestPlacesAreServedFromTheirStoredViewsWithoutDecodingADocument(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	before := map[string][]byte{}
	for _, p := range placePaths {
		before[p] = s.get(key, p).data(t)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE rm_places SET doc = 'not a document'`); err != nil {
		t.Fatal(err)
	}
	for _, p := range placePaths {
		if got := s.get(key, p).data(t); !bytes.Equal(got, before[p]) {
			t.Fatalf("%s without documents:\n%s\nwant\n%s", p, got, before[p])
		}
	}
	d, _ := s.get(key, "/api/data/places/lex-bourbon-bar").object(t)
	if d["canonical_url"] != baseURL+"/places/lex-bourbon-bar" || d["description"] != "Small batch bourbon and music." {
		t.Fatalf("detail %v", d)
	}
	rows, _ := s.get(key, "/api/data/search?lat=37.0834&lng=-88.6&radius=5").rows(t)
	if len(rows) != 4 || rows[0]["distance_km"] == nil || rows[0]["canonical_url"] != baseURL+"/places/geo-a" {
		t.Fatalf("search rows %v", rows)
	}
}

// A place whose row has no view (written before views existed) is rendered from its
// document, to the very bytes its view gives.
func TestAPlaceWithoutAStoredViewIsServedTheSameBytesFromItsDocument(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	before := map[string][]byte{}
	for _, p := range placePaths {
		before[p] = s.get(key, p).data(t)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE rm_places SET row_json = NULL, detail_json = NULL, trust_from = NULL,
		trust_until = NULL, menu_json = NULL, menu_items = 0, reviews_json = NULL`); err != nil {
		t.Fatal(err)
	}
	for _, p := range placePaths {
		if got := s.get(key, p).data(t); !bytes.Equal(got, before[p]) {
			t.Fatalf("%s from the document:\n%s\nwant\n%s", p, got, before[p])
		}
	}
	s.get(key, "/api/data/places/lex-bbq/menu").expectError(t, http.StatusNotFound, "no_menu_data")
	s.get(key, "/api/data/places/lex-bbq/reviews").expectError(t, http.StatusNotFound, "no_review_data")
}

// The stored detail holds field_trust as of the projection; once the request's instant
// leaves its trust window the detail is rendered afresh, so a tier still turns on the day.
func TestAStoredDetailIsNotServedOnceItsFieldTrustHasTurned(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	trustOf := func() any {
		d, _ := s.get(key, "/api/data/places/lex-bourbon-bar").object(t)
		return d["field_trust"].(map[string]any)["phone"].(map[string]any)["trustTier"]
	}
	if got := trustOf(); got != "verified" {
		t.Fatalf("phone trust at the import: %v", got)
	}
	// The phone was observed 2025-05-01T10:00Z: verified up to 180 days later.
	turn := time.Date(2025, 5, 1, 10, 0, 0, 0, time.UTC).Add(180 * 24 * time.Hour)
	s.clock.Advance(turn.Sub(s.clock.Now()))
	if got := trustOf(); got != "verified" {
		t.Fatalf("phone trust exactly 180 days after its observation: %v", got)
	}
	s.clock.Advance(time.Second)
	if got := trustOf(); got != "supported" {
		t.Fatalf("phone trust just past 180 days: %v", got)
	}
	s.clock.Advance(200 * 24 * time.Hour)
	if got := trustOf(); got != "low" {
		t.Fatalf("phone trust past 365 days: %v", got)
	}
}
