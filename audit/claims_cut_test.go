package audit_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// sameAsOnePass audits the store whole in one pass, then with the account's stream cut into
// segments of 256 events (whole store and account alone), and fails unless every audit names
// needle and the cut ones find exactly what the one pass finds.
func sameAsOnePass(t *testing.T, w world, needle string) {
	t.Helper()
	catchUp(t, w.pool)
	one, out := run(t, w.pool, audit.Options{})
	if !strings.Contains(strings.Join(one.Differences, "\n"), needle) {
		t.Fatalf("one pass: no difference saying %q:\n%s", needle, out)
	}
	want := slices.Sorted(slices.Values(one.Differences))
	for _, o := range []audit.Options{{SegmentEvents: 256, Workers: 3}, {AccountID: w.account, SegmentEvents: 256}} {
		rep, out := run(t, w.pool, o)
		if got := slices.Sorted(slices.Values(rep.Differences)); !slices.Equal(got, want) {
			t.Errorf("audit %+v, the stream cut into segments:\n%s\nwant what one pass finds:\n%s", o, out, strings.Join(want, "\n"))
		}
	}
}

// A stream longer than SegmentEvents is audited in segments, in parallel: a resource paid
// before a cut and paid again after it, the same UTC day, is paid twice all the same.
// newWorld pays place:p0 at noon (v4); 300 charges take the stream past its mark at v256; the
// second payment of p0, forged the same day, falls after the cut.
func TestAResourcePaidTwiceAcrossASegmentCutIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 300)
	cleanFirst(t, pool)
	forgeDetailCharge(t, pool, w.account, "p0", 1)
	sameAsOnePass(t, w, "place:p0 paid again on 2026-11-23")
}

// The converse across a cut: served free after it, never paid that day before it nor after.
// (Served free after the cut and paid before it is the history of every dedup in a long
// stream: TestSegmentedAccountAndRangeAuditsAgreeWithAWholeAudit audits those clean.)
func TestAResourceServedFreeAcrossASegmentCutThatWasNotPaidIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 300)
	cleanFirst(t, pool)
	forge(t, pool, w.account, noon.Add(time.Hour), domain.EventRequestDeduplicated, func(b int64) (any, int64) {
		return domain.RequestCharged{KeyNo: 1, Operation: domain.OpPlaceDetail, Deduplicated: []string{domain.PlaceResource("p99")}, BalanceAfter: b}, b
	}, `UPDATE accounts SET requests_deduplicated = requests_deduplicated + 1 WHERE account_id = $1`)
	sameAsOnePass(t, w, "place:p99 served free (deduplicated) on 2026-11-23")
}

// A charge in the first store's verbose form, with a day of its own, recorded after the first
// store was carried over, was written by no meter of this store: it is named, and checked as a
// charge of the day it was recorded on.
func TestAVerboseChargeWithADayRecordedAfterTheFirstStoreIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	cleanFirst(t, pool)
	key := keyOf(t, w, 1)
	at := time.Now().UTC().Add(time.Hour) // after migration 0005 was applied, whatever the test's clock
	forge(t, pool, w.account, at, domain.EventRequestCharged, func(b int64) (any, int64) {
		return domain.RequestCharged{KeyNo: 1, Operation: domain.OpPlaceDetail, Paid: []string{domain.PlaceResource("p0")},
			CreditsDelta: -1, BalanceAfter: b - 1}, b - 1
	}, `UPDATE accounts SET charged_credits = charged_credits + 1, requests_charged = requests_charged + 1 WHERE account_id = $1`)
	forge(t, pool, w.account, at.Add(time.Minute), domain.EventRequestCharged, func(b int64) (any, int64) {
		return map[string]any{"key_id": key, "operation": domain.OpPlaceDetail, "paid": []string{domain.PlaceResource("p0")},
			"credits_delta": -1, "balance_after": b - 1, "day": domain.Day(at.AddDate(0, 0, -1))}, b - 1
	}, `UPDATE accounts SET charged_credits = charged_credits + 1, requests_charged = requests_charged + 1 WHERE account_id = $1`)
	wantDifferenceNaming(t, pool, w.account, "only a charge of the first store may", "a verbose charge naming its own day, recorded today")
	wantDifferenceNaming(t, pool, w.account, "place:p0 paid again on "+domain.Day(at), "place:p0 paid twice today (the second naming the day before)")
}

// A segment that reads nothing of the stream (a -from range starting in the stream's gap just
// before a cut) knows nothing of the day the next one starts in: the dedups after the cut, of
// places paid at noon before the range, are not differences (found by review).
func TestARangeStartingJustBeforeACutFindsWhatOnePassFinds(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 252) // v255; the next charge is v256, a mark
	newWorld(t, pool, 0)        // another account's events: a gap in w's positions before v256
	for i := 0; i < 40; i++ {
		w.charge(t, fmt.Sprint("p", i%11))
	}
	catchUp(t, pool)
	var from int64
	if err := pool.QueryRow(ctx, `SELECT position - 1 FROM events WHERE stream_no = $1 AND version = 256`, w.caller.StreamNo).Scan(&from); err != nil {
		t.Fatal(err)
	}
	for _, o := range []audit.Options{{FromPosition: from}, {FromPosition: from, SegmentEvents: 256}, {FromPosition: from, SegmentEvents: 256, AccountID: w.account}} {
		if rep, out := run(t, pool, o); len(rep.Differences) != 0 {
			t.Errorf("audit %+v of a consistent store:\n%s", o, out)
		}
	}
}
