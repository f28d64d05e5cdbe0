package domain_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
)

var trustNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func trustObs(source string, value any, daysAgo int) domain.Observation {
	return domain.Observation{Source: source, Value: observed(value), ObservedAt: trustNow.AddDate(0, 0, -daysAgo)}
}

// observed is v as an import gives an observed value: JSON text.
func observed(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestFieldTrustTiers(t *testing.T) {
	const phone = "+1-859-555-0100"
	cases := []struct {
		name  string
		obs   []domain.Observation
		tier  string
		count int
	}{
		{"one source is thin", []domain.Observation{trustObs("a", phone, 3)}, domain.TrustThin, 1},
		{"one source a year old is still thin", []domain.Observation{trustObs("a", phone, 365)}, domain.TrustThin, 1},
		{"one source over a year old is low", []domain.Observation{trustObs("a", phone, 366)}, domain.TrustLow, 1},
		{"two agreeing sources are supported", []domain.Observation{trustObs("a", phone, 30), trustObs("b", phone, 3)}, domain.TrustSupported, 2},
		{"two disagreeing sources are low", []domain.Observation{trustObs("a", phone, 30), trustObs("b", "+1-859-555-0199", 3)}, domain.TrustLow, 2},
		{"three agreeing, newest 180 days old, are verified",
			[]domain.Observation{trustObs("a", phone, 400), trustObs("b", phone, 200), trustObs("c", phone, 180)}, domain.TrustVerified, 3},
		{"three agreeing, newest 181 days old, are supported",
			[]domain.Observation{trustObs("a", phone, 400), trustObs("b", phone, 200), trustObs("c", phone, 181)}, domain.TrustSupported, 3},
		{"three agreeing, newest 365 days old, are supported",
			[]domain.Observation{trustObs("a", phone, 500), trustObs("b", phone, 400), trustObs("c", phone, 365)}, domain.TrustSupported, 3},
		{"three agreeing, newest 366 days old, are low",
			[]domain.Observation{trustObs("a", phone, 500), trustObs("b", phone, 400), trustObs("c", phone, 366)}, domain.TrustLow, 3},
		{"three agreeing and one dissenting are low",
			[]domain.Observation{trustObs("a", "+1-859-555-0142", 90), trustObs("b", phone, 20), trustObs("c", phone, 10), trustObs("d", phone, 5)}, domain.TrustLow, 4},
		{"a newest observation that disagrees makes it low",
			[]domain.Observation{trustObs("a", phone, 90), trustObs("b", phone, 20), trustObs("c", "+1-859-555-0142", 1)}, domain.TrustLow, 3},
		{"formatting differences still agree",
			[]domain.Observation{trustObs("a", "(859) 555-0100", 9), trustObs("b", "859.555.0100", 8), trustObs("c", phone, 7)}, domain.TrustVerified, 3},
		{"a source counts once, by its newest observation",
			[]domain.Observation{trustObs("a", "+1-859-555-0199", 50), trustObs("a", phone, 10), trustObs("b", phone, 9)}, domain.TrustSupported, 2},
		{"the same source three times is still thin",
			[]domain.Observation{trustObs("a", phone, 30), trustObs("a", phone, 20), trustObs("a", phone, 10)}, domain.TrustThin, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := domain.ComputeFieldTrust(map[string][]domain.Observation{"phone": tc.obs}, map[string]any{"phone": phone}, trustNow)
			ft := got["phone"]
			if ft == nil {
				t.Fatal("no entry for phone")
			}
			if *ft.TrustTier != tc.tier || *ft.SourceCount != tc.count {
				t.Fatalf("tier %s, %d sources; want %s, %d", *ft.TrustTier, *ft.SourceCount, tc.tier, tc.count)
			}
			newest := tc.obs[0].ObservedAt
			for _, o := range tc.obs {
				if o.ObservedAt.After(newest) {
					newest = o.ObservedAt
				}
			}
			if !ft.LastVerifiedAt.Equal(newest) || ft.Value != phone {
				t.Fatalf("lastVerifiedAt %v value %v; want %v and the current phone", ft.LastVerifiedAt, ft.Value, newest)
			}
		})
	}
}

func TestFieldTrustAgeBoundariesAreExact(t *testing.T) {
	three := func(newest time.Time) []domain.Observation {
		return []domain.Observation{
			{Source: "a", Value: observed("x"), ObservedAt: newest.Add(-48 * time.Hour)},
			{Source: "b", Value: observed("x"), ObservedAt: newest.Add(-24 * time.Hour)},
			{Source: "c", Value: observed("x"), ObservedAt: newest},
		}
	}
	cases := []struct {
		age  time.Duration
		tier string
	}{
		{domain.TrustFreshFor, domain.TrustVerified},
		{domain.TrustFreshFor + time.Second, domain.TrustSupported},
		{domain.TrustStaleAt, domain.TrustSupported},
		{domain.TrustStaleAt + time.Second, domain.TrustLow},
	}
	for _, tc := range cases {
		got := domain.ComputeFieldTrust(map[string][]domain.Observation{"name": three(trustNow.Add(-tc.age))}, nil, trustNow)
		if tier := *got["name"].TrustTier; tier != tc.tier {
			t.Errorf("newest %v old: %s, want %s", tc.age, tier, tc.tier)
		}
	}
}

func TestFieldsWithoutObservationsHaveNullEntries(t *testing.T) {
	got := domain.ComputeFieldTrust(map[string][]domain.Observation{
		"hours": {trustObs("a", map[string]any{"mon": []any{}}, 1), trustObs("b", map[string]any{"mon": []any{}}, 2)},
		"phone": {},
	}, map[string]any{"website": "https://joes.example"}, trustNow)
	for _, f := range []string{"phone", "website", "address"} {
		if ft, ok := got[f]; !ok || ft != nil {
			t.Errorf("%s: %v, want a null entry", f, ft)
		}
	}
	if got["hours"] == nil || *got["hours"].TrustTier != domain.TrustSupported {
		t.Errorf("hours: %+v, want supported", got["hours"])
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var wire map[string]map[string]any
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	if wire["phone"] != nil {
		t.Errorf("phone on the wire: %v", wire["phone"])
	}
	h := wire["hours"]
	if _, ok := h["value"]; !ok || h["trustTier"] != "supported" || h["sourceCount"] != 2.0 || h["lastVerifiedAt"] == nil {
		t.Errorf("hours on the wire: %s", b)
	}
}

func TestPlaceFieldTrustUsesThePlacesOwnValues(t *testing.T) {
	site := "https://joes.example"
	p := domain.Place{PlaceRow: domain.PlaceRow{PlaceID: "p1", Name: "Joe's", Category: "food", Website: &site}, Sources: map[string][]domain.Observation{
		"website": {trustObs("a", "http://www.joes.example/", 4), trustObs("b", site, 3), trustObs("c", "HTTPS://JOES.EXAMPLE", 2)},
	}}
	got := domain.PlaceFieldTrust(p, trustNow)
	if ft := got["website"]; ft == nil || ft.Value != site || *ft.TrustTier != domain.TrustVerified {
		t.Fatalf("website trust %+v", ft)
	}
}
