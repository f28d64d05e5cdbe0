package audit_test

import (
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/eventstore"
)

// A range audit (-from) that starts after live events of an archived account checks the charges
// against the key facts in the range (docs/operations.md, "kyapi audit"): the key facts between
// the boundary and the range are not read, so the boundary's last archived event, when it is a
// rotation, says nothing of the range either. Three rotations within a day, the first archived
// as the boundary's last event, the second (which revokes key 1, still in grace) live before the
// range and the third in it, are a consistent history: the whole audit and the range audit
// before the archive are clean, and so must the range audit be after it.
func TestARangeAuditAfterTheBoundaryDoesNotReplayTheBoundarysStaleRotation(t *testing.T) {
	s := newArchivedStore(t) // v1 AccountOpened, v2 KeyIssued (key 1), v3 CreditsPurchased
	issue := func(at time.Duration) {
		t.Helper()
		s.at(archivedStart.Add(at))
		if _, err := s.accounts.IssueKey(ctx, s.account, eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	issue(time.Hour) // v4: key 2 rotates key 1, in grace to archivedStart+25h: the boundary's last event
	s.fill(t, 1000)
	issue(2 * time.Hour) // v5 KeyRevoked (key 1, still in grace), v6 KeyIssued (key 3 rotates key 2)
	var from int64       // the range starts after those
	if err := s.pool.QueryRow(ctx, `SELECT max(position) + 1 FROM events`).Scan(&from); err != nil {
		t.Fatal(err)
	}
	issue(3 * time.Hour) // v7 KeyRevoked (key 2), v8 KeyIssued (key 4 rotates key 3)
	s.catchUp(t)
	ranges := []audit.Options{{FromPosition: from}, {AccountID: s.account, FromPosition: from}}
	for _, o := range append([]audit.Options{{}, {AccountID: s.account}}, ranges...) {
		if d := s.audit(t, o); d != "" {
			t.Fatalf("control (nothing archived): audit %+v of a consistent store: differences\n%s", o, d)
		}
	}
	s.archiveFirstPartition(t)
	if d := s.audit(t, audit.Options{}); d != "" {
		t.Fatalf("the whole audit of the consistent archived store: differences\n%s", d)
	}
	for _, o := range ranges {
		if d := s.audit(t, o); d != "" {
			t.Errorf("audit %+v of a consistent archived store, the range after the second rotation: differences\n%s", o, d)
		}
	}
}
