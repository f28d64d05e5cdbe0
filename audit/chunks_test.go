package audit_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// The saved dedup claims (claim_chunks) are what a meter starting on an account reads instead
// of the day's charges: an edited one would have the resources it lacks charged again that
// day, or serve free what it forged. The audit compares them with the charges they save, and
// finds each edit before any meter acts on it; an honest store's chunks are clean.
func TestTheAuditFindsEditedClaimChunks(t *testing.T) {
	for _, c := range []struct {
		name, sql, want string
	}{
		{"a claim dropped", `UPDATE claim_chunks SET hashes = substr(hashes, 9) WHERE through = (SELECT min(through) FROM claim_chunks)`,
			"lack 1 resource paid by then: a meter would charge them again"},
		{"a claim forged", `UPDATE claim_chunks SET hashes = hashes || '\x0102030405060708'::bytea WHERE through = (SELECT min(through) FROM claim_chunks)`,
			"holds 1 claim of no resource paid by then: a meter would serve them free"},
		{"through moved past the head", `UPDATE claim_chunks SET through = through + 1000 WHERE through = (SELECT max(through) FROM claim_chunks)`,
			"past the stream's head"},
		{"position moved on", `UPDATE claim_chunks SET position = position + 1000000 WHERE through = (SELECT max(through) FROM claim_chunks)`,
			"a meter would skip it"},
		{"a chunk cut short", `UPDATE claim_chunks SET hashes = substr(hashes, 1, 13) WHERE through = (SELECT min(through) FROM claim_chunks)`,
			"not a whole number of 8-byte claims"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := pgtest.NewPool(t)
			w := newWorld(t, pool, 0)
			for i := range 560 { // two chunks of 240 claims, and charges after them
				w.charge(t, fmt.Sprint("p", i))
			}
			var chunks int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM claim_chunks`).Scan(&chunks); err != nil || chunks < 2 {
				t.Fatalf("%d claim chunks (%v), want at least 2", chunks, err)
			}
			catchUp(t, pool)
			if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) > 0 {
				t.Fatalf("the honest store: %s", out)
			}
			tamper(t, pool, c.sql)
			rep, out := run(t, pool, audit.Options{AccountID: w.account})
			if len(rep.Differences) == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("want a difference saying %q, got:\n%s", c.want, out)
			}
		})
	}
}
