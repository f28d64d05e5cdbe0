package audit_test

import (
	"strings"
	"testing"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A stream cut into segments (longer than SegmentEvents), and a -from range, start each part
// from the stream's event just before it. An event there whose payload cannot be read (edited
// with the triggers off) stopped the whole audit with an error naming neither the stream nor
// the event ("CreditsPurchased payload: json: ..."): no DIFF line at all, and nothing an
// operator could look up. It is a difference like any unreadable payload, and the audit goes
// on.
func TestAnUnreadableEventJustBeforeASegmentOrRangeIsADifferenceNotAnError(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 300) // v1 AccountOpened, v2 KeyIssued, v3 CreditsPurchased, v4..v303 charges; a mark at v256
	cleanFirst(t, pool)
	var cut, afterPurchase int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT position FROM events WHERE stream_no = $1 AND version = 256),
		(SELECT position FROM events WHERE stream_no = $1 AND version = 4)`, w.caller.StreamNo).Scan(&cut, &afterPurchase); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{3, 255} {
		tamper(t, pool, `UPDATE events SET payload = '{"credits_delta":"many"}' WHERE stream_no = $1 AND version = $2`, w.caller.StreamNo, v)
	}
	for _, c := range []struct {
		name string
		opts audit.Options
		want string
	}{
		{"whole, in segments", audit.Options{SegmentEvents: 256, Workers: 2}, "v255 (position"},
		{"a range starting after the purchase", audit.Options{FromPosition: afterPurchase}, "v3 (position"},
		{"a range starting at the cut", audit.Options{FromPosition: cut}, "v255 (position"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := audit.Run(ctx, pool, c.opts)
			if err != nil {
				t.Fatalf("the audit stopped: %v", err)
			}
			all := strings.Join(rep.Differences, "\n")
			found := false
			for _, d := range rep.Differences {
				found = found || strings.Contains(d, w.account) && strings.Contains(d, c.want) && strings.Contains(d, "payload cannot be read")
			}
			if !found {
				t.Errorf("no difference names the unreadable event (%s):\n%s", c.want, all)
			}
		})
	}
}
