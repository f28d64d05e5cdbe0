package audit_test

import (
	"strings"
	"testing"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// The ledger starts an archived account's pages after its boundary's position: a boundary
// moved onto a live fact hides that fact from every page and export. The audit names it.
func TestABoundaryPositionOnALiveFactIsADifference(t *testing.T) {
	s := newArchivedStore(t)
	s.fill(t, 1000)
	s.archiveFirstPartition(t) // the account's first 3 facts are archived
	for _, ref := range []string{"live-pay-1", "live-pay-2"} {
		if _, err := s.accounts.Purchase(ctx, s.account, 500, ref, eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	s.catchUp(t)
	if d := s.audit(t, audit.Options{}); d != "" {
		t.Fatalf("consistent store: %s", d)
	}
	views := commands.Views{Pool: s.pool}
	before, err := views.LedgerPage(ctx, s.account, 0, 100)
	if err != nil || len(before.Entries) != 2 {
		t.Fatalf("setup: ledger %+v, %v", before, err)
	}
	s.exec(t, `UPDATE stream_boundaries b SET position = $2 FROM streams st WHERE st.stream_no = b.stream_no AND st.stream_id = $1`,
		domain.AccountStream(s.account), before.Entries[0].Position)
	after, err := views.LedgerPage(ctx, s.account, 0, 100)
	if err != nil || len(after.Entries) != 1 {
		t.Fatalf("setup: the moved boundary should hide the first live fact from the ledger: %+v, %v", after, err)
	}
	want := "v4 (position " + itoa(before.Entries[0].Position) + "): its archived boundary says its archived history ends at position"
	for _, o := range []audit.Options{{}, {AccountID: s.account}} {
		if d := s.audit(t, o); !strings.Contains(d, want) {
			t.Errorf("audit %+v of a boundary moved onto the live fact v4: %q, want a line containing %q", o, d, want)
		}
	}
}
