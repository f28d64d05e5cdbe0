package audit_test

import (
	"strings"
	"testing"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A stream's head position (streams.head_position) is where the ledger's CSV export and the
// digests end the stream: moved back onto an older fact, the export silently stops there. The
// audit compares it with the position of the stream's last event, as it does the head's
// version, hash and time (found by review: it did not).
func TestAHeadPositionMovedBackIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 30)
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatal(out)
	}
	views := commands.Views{Pool: pool}
	before, err := views.LedgerHead(ctx, w.account)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE streams s SET head_position = (SELECT position FROM events e WHERE e.stream_no = s.stream_no AND version = 3)
		WHERE stream_id = $1`, domain.AccountStream(w.account)); err != nil {
		t.Fatal(err)
	}
	if after, err := views.LedgerHead(ctx, w.account); err != nil || after >= before {
		t.Fatalf("ledger head %d (%v) after the edit, was %d: the edit did not move it", after, err, before)
	}
	rep, out := run(t, pool, audit.Options{})
	if len(rep.Differences) != 1 || !strings.Contains(rep.Differences[0], "head says version") ||
		!strings.Contains(rep.Differences[0], "position") {
		t.Fatalf("head position moved back: want one head difference naming the positions, got %s", out)
	}
}
