package readapi_test

import (
	"encoding/json"
	"testing"
	"time"
)

// docs/api.md, "Places": observed numbers are compared by their exact value. Read as float64,
// two 20-digit values apart in their last digit were the same number, and three sources that
// disagree were "supported"; 1, 1.0 and 10e-1 are one number, and agree.
func TestObservedNumbersAreComparedByEveryDigit(t *testing.T) {
	at := start.Add(-10 * 24 * time.Hour)
	n := func(lit string) json.Number { return json.Number(lit) }
	s := newProjectedStack(t, []map[string]any{placeRecord("nums", "Number Place", "food.cafe", "paducah", 0, 0, 1, map[string]any{
		"sources": map[string]any{
			"rating_count": []any{obs("a", n("12345678901234567890"), at), obs("b", n("12345678901234567891"), at)},
			"rating":       []any{obs("a", n("1"), at), obs("b", n("1.0"), at), obs("c", n("10e-1"), at)},
			"phone":        []any{obs("a", n("85955501000000000001"), at), obs("b", n("85955501000000000002"), at)},
		},
	})})
	key := s.key()
	if got := trustOf(t, s, key, "nums", "rating_count")["trustTier"]; got != "low" {
		t.Errorf("rating_count %v, want low: the two sources differ in the 20th digit", got)
	}
	if got := trustOf(t, s, key, "nums", "rating")["trustTier"]; got != "verified" {
		t.Errorf("rating %v, want verified: 1, 1.0 and 10e-1 are one number", got)
	}
	if got := trustOf(t, s, key, "nums", "phone")["trustTier"]; got != "low" {
		t.Errorf("phone %v, want low: the digits differ in the last place", got)
	}
}
