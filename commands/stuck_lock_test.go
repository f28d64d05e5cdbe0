package commands_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// holdAccount locks an account's row in a transaction of its own, as an admin command that
// hangs or an operator's open transaction would; release ends it.
func holdAccount(t *testing.T, s stack, accountID string) (release func()) {
	t.Helper()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, accountID); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(ctx)
		}
	}
	t.Cleanup(release)
	return release
}

// waitForLockWaiter returns once a session waits for a row lock.
func waitForLockWaiter(t *testing.T, s stack) {
	t.Helper()
	for !lockWaiter(t, s, "%") {
		time.Sleep(5 * time.Millisecond)
	}
}

// lockWaiter reports whether a session of the test's database whose statement is LIKE
// queryLike waits for a lock.
func lockWaiter(t *testing.T, s stack, queryLike string) bool {
	t.Helper()
	var waiting bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1)`, queryLike).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	return waiting
}

type chargeAnswer struct {
	res commands.ChargeResult
	err error
}

// An account whose row another transaction holds fails its own charges, 503 unavailable with
// nothing charged, after the meter's LockWait; the other accounts of its batch are charged and
// answered at once, not held with it, and nobody is told the outcome is unknown.
func TestAnAccountHeldByAStuckTransactionFailsAloneAndItsBatchIsAnsweredAtOnce(t *testing.T) {
	s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon}, commands.MeterOptions{LockWait: 4 * time.Second, BatchWait: 20 * time.Second})
	a, keyA := fundedAccount(t, s, 500)
	_, keyB := fundedAccount(t, s, 500)
	c, keyC := fundedAccount(t, s, 500)
	for _, k := range []commands.IssuedKey{keyA, keyB, keyC} { // the meter holds each account
		if _, err := s.charge(domain.HashKey(k.APIKey), domain.OpPlaceDetail, domain.PlaceResource("warm")); err != nil {
			t.Fatal(err)
		}
	}
	before := ledgerOf(t, s, a)

	// C's row held: its charge waits for the lock under the meter's LockWait, and A's and B's,
	// sent meanwhile, queue up for the next batch, which holds both.
	releaseC := holdAccount(t, s, c)
	ask := func(k commands.IssuedKey, place string) <-chan chargeAnswer {
		out := make(chan chargeAnswer, 1)
		go func() {
			res, err := s.charge(domain.HashKey(k.APIKey), domain.OpPlaceDetail, domain.PlaceResource(place))
			out <- chargeAnswer{res, err}
		}()
		return out
	}
	answerC := ask(keyC, "c1")
	waitForLockWaiter(t, s)
	releaseA := holdAccount(t, s, a)
	answerA, answerB := ask(keyA, "a1"), ask(keyB, "b1")
	time.Sleep(300 * time.Millisecond) // both queued behind C's batch
	releaseC()
	if got := <-answerC; got.err != nil || got.res.Credits != 1 {
		t.Fatalf("C, once its row was released: %+v %v", got.res, got.err)
	}

	// B is answered while A still waits for its row: A cannot be answered before LockWait.
	gotB := <-answerB
	select {
	case got := <-answerA:
		t.Fatalf("A was answered (%+v %v) before B was: B waited with A", got.res, got.err)
	default:
	}
	if gotB.err != nil || gotB.res.Credits != 1 {
		t.Fatalf("B (its row free): %+v %v; want charged", gotB.res, gotB.err)
	}
	gotA := <-answerA
	releaseA()
	if gotA.err == nil || errors.Is(gotA.err, domain.ErrOutcomeUnknown) {
		t.Fatalf("A (its row held): %+v %v; want a refusal that says nothing was charged", gotA.res, gotA.err)
	}
	if e := httpx.MapError(gotA.err); e.Status != http.StatusServiceUnavailable || e.Outcome != httpx.OutcomeNone {
		t.Fatalf("A's answer maps to %+v (%v); want 503 unavailable", e, gotA.err)
	}
	if after := ledgerOf(t, s, a); after.balance != before.balance || after.events != before.events {
		t.Fatalf("A's ledger moved while its charge failed: %+v -> %+v", before, after)
	}
	// Its row free again, A is charged as ever.
	if _, err := s.charge(domain.HashKey(keyA.APIKey), domain.OpPlaceDetail, domain.PlaceResource("a1")); err != nil {
		t.Fatal(err)
	}
}

// Several charges of a held account in one batch fail together after one wait (LockWait), not
// one wait each: the row is let go 1.5 LockWaits after the batch began to wait, and none of
// them is charged. Retried one by one, each would wait again and the later ones be charged.
func TestTheChargesOfAHeldAccountFailTogetherAfterOneWait(t *testing.T) {
	const lockWait = 2 * time.Second
	// HeldWait as long as LockWait: the second batch waits for the row as the first did (a held
	// account's later charges otherwise wait less, as the next test shows).
	s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon}, commands.MeterOptions{LockWait: lockWait, HeldWait: lockWait, BatchWait: 30 * time.Second, Workers: 1})
	a, keyA := fundedAccount(t, s, 500)
	if _, err := s.charge(domain.HashKey(keyA.APIKey), domain.OpPlaceDetail, domain.PlaceResource("warm")); err != nil {
		t.Fatal(err)
	}
	before := ledgerOf(t, s, a)
	release := holdAccount(t, s, a)
	ask := func(place string) <-chan chargeAnswer {
		out := make(chan chargeAnswer, 1)
		go func() {
			res, err := s.charge(domain.HashKey(keyA.APIKey), domain.OpPlaceDetail, domain.PlaceResource(place))
			out <- chargeAnswer{res, err}
		}()
		return out
	}
	first := ask("a0")
	waitForLockWaiter(t, s) // the first batch waits for the row; the next charges queue behind it
	var rest []<-chan chargeAnswer
	for _, place := range []string{"a1", "a2", "a3", "a4"} {
		rest = append(rest, ask(place))
	}
	if got := <-first; got.err == nil {
		t.Fatalf("the first charge of the held account: %+v; want refused", got.res)
	}
	waitForLockWaiter(t, s) // the batch of the four waits
	time.Sleep(lockWait * 3 / 2)
	release()
	for i, ch := range rest {
		got := <-ch
		if e := httpx.MapError(got.err); got.err == nil || e.Status != http.StatusServiceUnavailable || e.Outcome != httpx.OutcomeNone {
			t.Errorf("charge %d of the held account: %+v %v; want 503 unavailable, as its batch's", i+1, got.res, got.err)
		}
	}
	if after := ledgerOf(t, s, a); after.balance != before.balance || after.events != before.events {
		t.Fatalf("the held account's ledger moved: %+v -> %+v", before, after)
	}
}

// Once a batch has waited LockWait for an account's row in vain, that account's next charges
// wait for it only HeldWait while it stays held, and so do the batches of the process that
// hold them: a row an operator's transaction keeps for minutes, with the account's clients
// asking all along, must not stall the process's batches for LockWait one after another. Each
// charge still fails 503 with nothing charged, and once the row is let go the account is
// charged as ever. Measured side by side: three charges after the first failure take less
// than the first one's wait (LockWait each before).
func TestAHeldAccountsLaterChargesFailWithoutWaitingTheWholeLockWait(t *testing.T) {
	const lockWait = 2 * time.Second
	s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon}, commands.MeterOptions{LockWait: lockWait, BatchWait: 30 * time.Second})
	a, keyA := fundedAccount(t, s, 500)
	if _, err := s.charge(domain.HashKey(keyA.APIKey), domain.OpPlaceDetail, domain.PlaceResource("warm")); err != nil {
		t.Fatal(err)
	}
	before := ledgerOf(t, s, a)
	release := holdAccount(t, s, a)
	unavailable := func(place string) time.Duration {
		t.Helper()
		start := time.Now()
		res, err := s.charge(domain.HashKey(keyA.APIKey), domain.OpPlaceDetail, domain.PlaceResource(place))
		if e := httpx.MapError(err); err == nil || e.Status != http.StatusServiceUnavailable || e.Outcome != httpx.OutcomeNone {
			t.Fatalf("a charge of the held account (%s): %+v %v; want 503 unavailable", place, res, err)
		}
		return time.Since(start)
	}
	first := unavailable("a0")
	var later time.Duration
	for _, place := range []string{"a1", "a2", "a3"} {
		later += unavailable(place)
	}
	if later >= first {
		t.Errorf("three charges of the still-held account took %v, the first alone %v: each waited the whole LockWait again", later, first)
	}
	release()
	if after := ledgerOf(t, s, a); after.balance != before.balance || after.events != before.events {
		t.Fatalf("the held account's ledger moved: %+v -> %+v", before, after)
	}
	res, err := s.charge(domain.HashKey(keyA.APIKey), domain.OpPlaceDetail, domain.PlaceResource("a1"))
	if err != nil || res.Credits != 1 {
		t.Fatalf("the account once its row was let go: %+v %v; want charged", res, err)
	}
}

// A refusal also tells that the account's row was got: an account whose row was held, then
// refused a charge (too few credits) once it was let go, is waited for the whole LockWait
// again the next time its row is held, not failed after the short HeldWait of a row still held.
func TestAHeldAccountRefusedOnceItsRowIsFreeIsWaitedForInFullAgain(t *testing.T) {
	const lockWait, heldWait = 3 * time.Second, 50 * time.Millisecond
	s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon}, commands.MeterOptions{LockWait: lockWait, HeldWait: heldWait, BatchWait: 30 * time.Second})
	a, key := fundedAccount(t, s, 0)
	hash := domain.HashKey(key.APIKey)
	refused := func(what string, res commands.ChargeResult, err error) {
		t.Helper()
		if !errors.Is(err, domain.ErrInsufficientCredits) {
			t.Fatalf("%s: %+v %v; want refused, too few credits", what, res, err)
		}
	}
	res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p0"))
	refused("a charge of the account with no credits", res, err)

	release := holdAccount(t, s, a)
	res, err = s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p1"))
	if e := httpx.MapError(err); err == nil || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("a charge while the row is held: %+v %v; want 503 unavailable", res, err)
	}
	release()
	res, err = s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p2"))
	refused("a charge once the row was let go", res, err)

	release = holdAccount(t, s, a)
	answer := make(chan chargeAnswer, 1)
	go func() {
		res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p3"))
		answer <- chargeAnswer{res, err}
	}()
	waitForLockWaiter(t, s)
	time.Sleep(10 * heldWait) // past HeldWait, well within LockWait
	release()
	got := <-answer
	refused("a charge waiting while the row is held again, then let go", got.res, got.err)
	if l := ledgerOf(t, s, a); l.balance != 0 || !l.consistent() {
		t.Fatalf("the account's ledger: %+v", l)
	}
}
