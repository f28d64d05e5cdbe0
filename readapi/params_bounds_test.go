package readapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A number is in its range by its exact decimal value, not by the float64 it rounds to:
// 90.0000000000000001 is above 90 (decisions.md: out of range is 400, never clamped) though
// it rounds to 90, and a radius of 1e-400 km is above 0 though it rounds to 0. Read as floats,
// the first was answered (and charged) as 90 and the second refused with a message, "must be a
// number in (0, 50]", that it satisfies.
func TestANumberIsInRangeByItsExactValueNotByTheFloatItRoundsTo(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	for _, c := range []struct{ query, param string }{
		{"lat=90.0000000000000001&lng=-84.5", "lat"},
		{"lat=-90.00000000000000001&lng=-84.5", "lat"},
		{"lat=38&lng=180.00000000000001", "lng"},
		{"lat=38&lng=-180.000000000000000001", "lng"},
		{"lat=38.04&lng=-84.5&radius=50.0000000000000001", "radius"},
		{"lat=38.04&lng=-84.5&radius=5000000000000000001e-17", "radius"},
		{"lat=38.04&lng=-84.5&radius=-1e-400", "radius"},
		{"lat=38.04&lng=-84.5&radius=0e-400", "radius"},
		{"lat=38.04&lng=-84.5&radius=-0.0", "radius"},
	} {
		r := s.get(key, "/api/data/search?"+c.query)
		r.expectError(t, http.StatusBadRequest, "bad_request")
		var e struct{ Error string }
		if err := json.Unmarshal(r.Body, &e); err != nil || !strings.Contains(e.Error, `"`+c.param+`"`) {
			t.Errorf("%s: error %q does not name %q", c.query, e.Error, c.param)
		}
	}
	if b := s.balance(account); b != 1000 {
		t.Fatalf("balance %d after 400s, want 1000", b)
	}
	// At the bounds exactly, however written, and just inside them, the values are in range.
	for _, q := range []string{
		"lat=90.000000000000000000&lng=-180e0&radius=50.0000000000000000000",
		"lat=-9e1&lng=1.8e%2B2&radius=5e1",
		"lat=89.99999999999999999&lng=-84.5&radius=49.999999999999999999",
		"lat=38.04&lng=-84.5&radius=1e-400", // greater than 0: nothing but the point itself
		"lat=38.04&lng=-84.5&radius=0.0000000000000000000000000001",
	} {
		if r := s.get(key, "/api/data/search?"+q); r.Status != http.StatusOK {
			t.Errorf("%s: %d %s, want 200", q, r.Status, r.Body)
		}
	}
}
