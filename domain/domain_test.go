package domain_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func TestARotatedKeyWorksForExactly24Hours(t *testing.T) {
	grace := t0.Add(domain.GracePeriod)
	k := domain.Key{ID: "k", State: domain.KeyStateGrace, GraceUntil: &grace}
	cases := []struct {
		name string
		at   time.Time
		want error
	}{
		{"at rotation", t0, nil},
		{"at 23:59:59", t0.Add(23*time.Hour + 59*time.Minute + 59*time.Second), nil},
		{"at 24:00:00", t0.Add(24 * time.Hour), domain.ErrKeyRevoked},
		{"a day later", t0.Add(48 * time.Hour), domain.ErrKeyRevoked},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := k.Authorize(c.at); !errors.Is(err, c.want) {
				t.Fatalf("Authorize = %v, want %v", err, c.want)
			}
		})
	}
}

func TestRevokedKeysNeverWorkAndActiveKeysAlways(t *testing.T) {
	if err := (domain.Key{State: domain.KeyStateRevoked}).Authorize(t0); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("revoked key: %v", err)
	}
	if err := (domain.Key{State: domain.KeyStateActive}).Authorize(t0.Add(1000 * time.Hour)); err != nil {
		t.Fatalf("active key: %v", err)
	}
}

func TestIssuingAKeyRotatesTheActiveOneAndRevokesAnOlderGraceKey(t *testing.T) {
	graceEnd := t0.Add(time.Hour)
	expired := t0.Add(-time.Hour)
	keys := []domain.Key{
		{ID: "active", State: domain.KeyStateActive},
		{ID: "in-grace", State: domain.KeyStateGrace, GraceUntil: &graceEnd},
		{ID: "grace-over", State: domain.KeyStateGrace, GraceUntil: &expired},
		{ID: "revoked", State: domain.KeyStateRevoked},
	}
	r := domain.PlanKeyIssue(keys, t0)
	if r.Rotated == nil || r.Rotated.ID != "active" || !r.GraceUntil.Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("rotated = %+v until %v", r.Rotated, r.GraceUntil)
	}
	if len(r.Revoked) != 1 || r.Revoked[0].ID != "in-grace" {
		t.Fatalf("revoked = %+v, want only in-grace", r.Revoked)
	}
	if first := domain.PlanKeyIssue(nil, t0); first.Rotated != nil || len(first.Revoked) != 0 {
		t.Fatalf("first key rotated something: %+v", first)
	}
	// The active key was revoked: the new key rotates nothing, and the key in grace keeps it.
	if r := domain.PlanKeyIssue(keys[1:], t0); r.Rotated != nil || len(r.Revoked) != 0 {
		t.Fatalf("a key issued with none active: %+v; want no rotation and the grace key left in grace", r)
	}
}

func TestGeneratedKeysAreWellFormedAndTyposAreRefused(t *testing.T) {
	key, err := domain.NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "svc_live_") || len(key) < len("svc_live_")+32 || !domain.WellFormedKey(key) {
		t.Fatalf("bad key %q", key)
	}
	typo := key[:20] + string(rune(key[20]^1)) + key[21:]
	if domain.WellFormedKey(typo) {
		t.Fatalf("checksum accepted a typo")
	}
	same, _ := domain.NewKey(bytes.NewReader(bytes.Repeat([]byte{7}, 64)))
	again, _ := domain.NewKey(bytes.NewReader(bytes.Repeat([]byte{7}, 64)))
	if same != again {
		t.Fatalf("key generation is not a function of its randomness")
	}
}

func TestAuthorizationHeaderParsing(t *testing.T) {
	key, _ := domain.NewKey(nil)
	cases := []struct {
		header string
		want   error
	}{
		{"", domain.ErrMissingKey},
		{"Bearer", domain.ErrMissingKey},
		{"Bearer   ", domain.ErrMissingKey},
		{"Basic abc", domain.ErrMissingKey},
		{key, domain.ErrMissingKey},
		{"Bearer svc_live_short", domain.ErrInvalidKey},
		{"Bearer sk_test_" + strings.Repeat("a", 40), domain.ErrInvalidKey},
		{"Bearer " + key, nil},
		{"bearer " + key, nil},
		{"  Bearer   " + key + "  ", nil},
		// A bearer token is one word (RFC 6750's b64token has no blank): more is a malformed
		// header, whatever the first word is.
		{"Bearer " + key + " extra", domain.ErrMissingKey},
		{"Bearer " + key + "\textra", domain.ErrMissingKey},
		{"Bearer svc_live_short extra", domain.ErrMissingKey},
	}
	for _, c := range cases {
		got, err := domain.ParseAuthorization(c.header)
		if !errors.Is(err, c.want) {
			t.Errorf("%q: err = %v, want %v", c.header, err, c.want)
		}
		if err == nil && got != key {
			t.Errorf("%q: key = %q", c.header, got)
		}
	}
}

func TestAuthorizationSentTwiceIsMalformed(t *testing.T) {
	key, _ := domain.NewKey(nil)
	if got, err := domain.ParseAuthorizationFields([]string{"Bearer " + key}); err != nil || got != key {
		t.Fatalf("one field: %q %v", got, err)
	}
	for _, fields := range [][]string{nil, {"Bearer " + key, "Bearer " + key}, {"Bearer " + key, "Bearer junk"}} {
		if _, err := domain.ParseAuthorizationFields(fields); !errors.Is(err, domain.ErrMissingKey) {
			t.Errorf("%q: err = %v, want ErrMissingKey", fields, err)
		}
	}
}

func TestPurchaseBounds(t *testing.T) {
	cases := []struct {
		cents int64
		ok    bool
	}{{499, false}, {500, true}, {2_500_000, true}, {2_500_001, false}, {0, false}, {-500, false}}
	for _, c := range cases {
		if err := domain.ValidatePurchase(c.cents); (err == nil) != c.ok {
			t.Errorf("ValidatePurchase(%d) = %v, want ok=%v", c.cents, err, c.ok)
		}
	}
	if got := domain.CreditsForCents(500); got != 1000 {
		t.Errorf("$5 buys %d credits, want 1000", got)
	}
}

func TestDedupDayEndsAtUTCMidnight(t *testing.T) {
	before := time.Date(2026, 11, 23, 23, 59, 59, 999_999_999, time.UTC)
	after := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	if domain.Day(before) == domain.Day(after) {
		t.Fatalf("23:59:59.999 and 00:00 share a dedup day")
	}
	eastern := time.FixedZone("EST", -5*3600)
	if got := domain.Day(time.Date(2026, 11, 23, 20, 0, 0, 0, eastern)); got != "2026-11-24" {
		t.Fatalf("20:00 EST is %s in UTC days, want 2026-11-24", got)
	}
}

func claimedSet(rs ...string) func(string) bool {
	m := map[string]bool{}
	for _, r := range rs {
		m[r] = true
	}
	return func(r string) bool { return m[r] }
}

func TestFixedCostCharges(t *testing.T) {
	cases := []struct {
		name     string
		op       domain.Operation
		balance  int64
		claimed  []string
		wantErr  error
		wantCost int64
		wantFree bool
	}{
		{"towns at exactly the cost", domain.OpTowns, 10, nil, nil, 10, false},
		{"towns one credit short is refused", domain.OpTowns, 9, nil, domain.ErrInsufficientCredits, 0, false},
		{"menu one credit short is refused", domain.OpPlaceMenu, 2, nil, domain.ErrInsufficientCredits, 0, false},
		{"deduplicated is free at zero balance", domain.OpTowns, 0, []string{"towns"}, nil, 0, true},
		{"detail costs one", domain.OpPlaceDetail, 100, nil, nil, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := domain.DecideCharge(c.op, []string{"towns"}, c.balance, claimedSet(c.claimed...))
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if d.Credits != c.wantCost || d.FullyDeduplicated() != c.wantFree {
				t.Fatalf("decision %+v", d)
			}
		})
	}
}

func TestPerRowChargesPayInOrderAndOmitWhatCannotBePaid(t *testing.T) {
	rows := []string{"place:a", "place:b", "place:c", "place:d", "place:e"}
	cases := []struct {
		name        string
		balance     int64
		claimed     []string
		wantServed  []bool
		wantCredits int64
		wantOmitted int
		wantErr     error
	}{
		{"enough for all", 10, nil, []bool{true, true, true, true, true}, 5, 0, nil},
		{"runs out after two", 2, nil, []bool{true, true, false, false, false}, 2, 3, nil},
		{"deduplicated rows are free wherever they stand", 2, []string{"place:b", "place:e"}, []bool{true, true, true, false, true}, 2, 1, nil},
		{"all deduplicated at zero balance", 0, rows, []bool{true, true, true, true, true}, 0, 0, nil},
		{"zero balance and nothing deduplicated is refused", 0, nil, nil, 0, 0, domain.ErrInsufficientCredits},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := domain.DecideCharge(domain.OpPlaceList, rows, c.balance, claimedSet(c.claimed...))
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if err != nil {
				return
			}
			if !reflect.DeepEqual(d.Served, c.wantServed) || d.Credits != c.wantCredits || d.OmittedUnpaid != c.wantOmitted {
				t.Fatalf("decision %+v", d)
			}
			if d.Partial() != (c.wantOmitted > 0) {
				t.Fatalf("partial = %v", d.Partial())
			}
			if d.Credits > c.balance {
				t.Fatalf("spent %d of %d", d.Credits, c.balance)
			}
		})
	}
	if d, err := domain.DecideCharge(domain.OpSearch, nil, 0, claimedSet()); err != nil || d.Credits != 0 {
		t.Fatalf("no match: %+v, %v", d, err)
	}
}

func TestPricesFollowTheCostTable(t *testing.T) {
	want := map[domain.Operation]int64{
		domain.OpPlaceList: 1, domain.OpPlaceDetail: 1, domain.OpPlaceMenu: 3, domain.OpReviews: 2,
		domain.OpRelated: 2, domain.OpSearch: 1, domain.OpTrending: 5, domain.OpHiddenGems: 5,
		domain.OpTowns: 10, domain.OpEvents: 5,
	}
	for op, cost := range want {
		if op.Cost() != cost {
			t.Errorf("%s costs %d, want %d", op, op.Cost(), cost)
		}
	}
	if !domain.OpPlaceList.PerRow() || !domain.OpSearch.PerRow() || domain.OpTowns.PerRow() {
		t.Errorf("per-row flags wrong")
	}
}

func TestSlugifyMakesTheCatalogsTownSlugs(t *testing.T) {
	cases := map[string]string{
		"Bowling Green":  "bowling-green",
		"St. Matthews":   "st-matthews",
		"Miller's Creek": "millers-creek",
		"Louisville/Jefferson County metro government (balance)": "louisville-jefferson-county-metro-government-balance",
		"  --Berea--  ": "berea",
	}
	for in, want := range cases {
		if got := domain.Slugify(in); got != want {
			t.Errorf("Slugify(%q) = %q, want %q", in, got, want)
		}
	}
}
