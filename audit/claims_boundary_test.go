package audit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
)

// api-spec.md: "Repeat requests for the same resource within one UTC day are charged once", and
// kyapi audit checks "that each resource is paid at most once per UTC day" (docs/operations.md).
// A place paid at 09:00, archived, and paid again at 10:00 the same UTC day, after the boundary
// (a charge written behind the meter's back, the write model moved with it), is a double charge
// the audit names before the archive; archiving the first charge must not make it audit clean.
func TestAResourcePaidBeforeTheBoundaryAndAgainAfterItTheSameDayIsADifference(t *testing.T) {
	s := newArchivedStore(t) // v1 AccountOpened, v2 KeyIssued (key 1), v3 CreditsPurchased: 1,000 credits
	s.at(archivedStart.Add(time.Hour))
	s.charge(t, s.hash1, "twice", nil) // v4: place:twice paid at 09:00, the boundary's last event
	s.fill(t, 1000)
	forge(t, s.pool, s.account, archivedStart.Add(2*time.Hour), domain.EventRequestCharged, func(b int64) (any, int64) {
		return domain.RequestCharged{KeyNo: 1, Operation: domain.OpPlaceDetail, Paid: []string{domain.PlaceResource("twice")},
			CreditsDelta: -1, BalanceAfter: b - 1}, b - 1
	}, `UPDATE accounts SET charged_credits = charged_credits + 1, requests_charged = requests_charged + 1 WHERE account_id = $1`)
	s.catchUp(t)
	want := "account " + s.account + " v5 (position "
	paidAgain := "place:twice paid again on " + domain.Day(archivedStart)
	for _, o := range []audit.Options{{}, {AccountID: s.account}} {
		if d := s.audit(t, o); !strings.Contains(d, want) || !strings.Contains(d, paidAgain) {
			t.Fatalf("control (nothing archived): audit %q: differences\n%s\nwant one naming v5: %q", o.AccountID, d, paidAgain)
		}
	}
	s.archiveFirstPartition(t)
	for _, o := range []audit.Options{{}, {AccountID: s.account}} {
		if d := s.audit(t, o); !strings.Contains(d, paidAgain) {
			t.Errorf("audit %q with the first payment archived: differences\n%s\nwant one saying %q: the account paid twice on %s",
				o.AccountID, d, paidAgain, domain.Day(archivedStart))
		}
	}
}
