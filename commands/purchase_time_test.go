package commands_test

import (
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A purchase's row (what the console reads back when a payment reference is typed again) is
// dated as its CreditsPurchased fact is. The fact is recorded at the later of the command's
// clock and its stream's newest fact (within a stream recorded_at never decreases): when a
// process whose clock runs ahead recorded the account's last fact, the purchase's fact is dated
// after the clock of the process recording it, and so must its row be.
func TestAPurchaseRowIsDatedAsItsFactWhenAnotherProcessClockRanAhead(t *testing.T) {
	db := pgtest.NewDatabase(t)
	ahead := newStack(t, db, &clock{now: noon.Add(time.Hour)})
	behind := newStack(t, db, &clock{now: noon})
	accountID, _ := fundedAccount(t, ahead, 0) // opened and keyed at 13:00 by the process ahead
	if _, err := behind.accounts.Purchase(ctx, accountID, 500, "pay-behind", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	p, ok, err := behind.views.Payment(ctx, "pay-behind")
	if err != nil || !ok {
		t.Fatalf("payment: ok %v, err %v", ok, err)
	}
	entries, err := behind.views.Ledger(ctx, accountID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var fact *time.Time
	for _, e := range entries {
		if e.Type == domain.EventCreditsPurchased {
			fact = &e.RecordedAt
		}
	}
	if fact == nil {
		t.Fatal("no CreditsPurchased in the ledger")
	}
	if !p.RecordedAt.Equal(*fact) {
		t.Errorf("the purchases row says the payment was recorded at %s, its CreditsPurchased fact at %s",
			p.RecordedAt.Format(time.RFC3339Nano), fact.Format(time.RFC3339Nano))
	}
	auditClean(t, behind.pool)
}
