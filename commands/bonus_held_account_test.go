package commands_test

import (
	"testing"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A grant to many accounts never holds an account longer than a charge does (docs/api.md,
// "Bonus grants"). Here one account of a chunk is held by a transaction that does not end (an
// admin command that hangs, an operator's open transaction in psql): the grant waits for that
// one account, but not holding the chunk's others, whose charges go on being answered — not
// failed 503 after the meter's LockWait for as long as the held row stays held. Once the row is
// let go the grant finishes, every account credited once.
func TestAGrantWaitingForOneHeldAccountDoesNotHoldTheOthersOfItsChunk(t *testing.T) {
	s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon})
	a, keyA := fundedAccount(t, s, 500)
	b, keyB := fundedAccount(t, s, 500)
	if b < a { // a is credited first (account-id order), b after it, in one chunk
		a, b, keyA = b, a, keyB
	}
	before := ledgerOf(t, s, a)

	release := holdAccount(t, s, b)
	granted := make(chan error, 1)
	go func() {
		_, err := s.accounts.GrantBonus(ctx, "outage-held", 100, "outage", eventstore.Metadata{})
		granted <- err
	}()
	waitForLockWaiter(t, s) // the grant waits for b's row

	res, err := s.charge(domain.HashKey(keyA.APIKey), domain.OpPlaceDetail, domain.PlaceResource("a1"))
	release()
	if gerr := <-granted; gerr != nil {
		t.Fatal(gerr)
	}
	if err != nil || res.Credits != 1 {
		t.Errorf("a charge of an account the grant had reached, while the grant waited for another account's row: %+v %v; "+
			"want it charged, not held by the grant", res, err)
	}
	for _, id := range []string{a, b} {
		l := ledgerOf(t, s, id)
		if l.totals.BonusCredits != 100 || !l.consistent() {
			t.Errorf("account %s after the grant: bonus %d, ledger %+v; want 100 once", id, l.totals.BonusCredits, l)
		}
	}
	wantA := before.balance + 100
	if err == nil {
		wantA -= res.Credits
	}
	if got := ledgerOf(t, s, a).balance; got != wantA {
		t.Errorf("a's balance %d, want %d", got, wantA)
	}
	g, err := s.accounts.Grant(ctx, "outage-held")
	if err != nil || g.State != "done" || g.Accounts != 2 {
		t.Errorf("the grant: %+v %v; want done with 2 accounts", g, err)
	}
	auditClean(t, s.pool)
}
