package audit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/audit"
)

// An audit whose -to ends inside archived history cannot read an event of its range: the audit
// starts every stream from its archived boundary. It used to report "0 events: 0 differences",
// which an auditor reads as a clean range; it is refused, saying that the range is archived
// and how to audit it.
func TestAnAuditRangeEndingInArchivedHistoryIsRefused(t *testing.T) {
	s := newArchivedStore(t)
	s.charge(t, s.hash1, "archived-1", nil)
	s.fill(t, 1000)
	s.archiveFirstPartition(t)
	s.charge(t, s.hash1, "after-1", nil)
	s.catchUp(t)

	_, err := audit.Run(ctx, s.pool, audit.Options{FromPosition: 1, ToPosition: 500})
	if !errors.Is(err, audit.ErrRangeArchived) || !strings.Contains(err.Error(), "kyapi restore") {
		t.Errorf("audit of positions 1 to 500, all archived: %v; want it refused as archived, naming kyapi restore", err)
	}
	// A range that reaches past the archive is audited from the boundary, as a whole audit is.
	rep, err := audit.Run(ctx, s.pool, audit.Options{FromPosition: 1, ToPosition: 5000})
	if err != nil || len(rep.Differences) != 0 || rep.Events == 0 {
		t.Errorf("audit of positions 1 to 5000, past the archive: %d events, %v, %v; want the events after the boundary audited, clean", rep.Events, rep.Differences, err)
	}
}
