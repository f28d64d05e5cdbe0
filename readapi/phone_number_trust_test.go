package readapi_test

import (
	"testing"
	"time"
)

// docs/api.md, "Places": observed values are compared "phones by their digits (a leading US 1
// dropped)". A source may give the number as a JSON number: its digits are the same phone.
func TestAPhoneObservedAsANumberWithTheUSOneAgreesWithTheSameNumberWritten(t *testing.T) {
	day := 24 * time.Hour
	s := newProjectedStack(t, []map[string]any{placeRecord("ph", "Phone Place", "food.cafe", "paducah", 0, 0, 1, map[string]any{
		"phone": "(859) 555-0100",
		"sources": map[string]any{"phone": []any{
			obs("a", "(859) 555-0100", start.Add(-10*day)), obs("b", "859.555.0100", start.Add(-10*day)), obs("c", 18595550100, start.Add(-10*day)),
		}},
	})})
	if got := trustOf(t, s, s.key(), "ph", "phone")["trustTier"]; got != "verified" {
		t.Fatalf("phone %v, want verified: three sources give the same digits", got)
	}
}
