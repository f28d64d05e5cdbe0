package commands_test

import (
	"sync"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A grant waits for the key changes already asked for, those waiting on their account's row
// included (docs/api.md, "Bonus grants"). Here one waits on a row held by a transaction that
// does not end (an admin command that hangs, an operator's open transaction in psql), so the
// grant waits too; but key changes of other accounts asked for meanwhile must not wait behind
// the grant, or the revoke of a compromised key would wait as long as that row stays held,
// where docs/api.md promises a revocation at once.
func TestAKeyChangeWaitingForAHeldAccountHoldsUpNoRevokeOfAnotherAccount(t *testing.T) {
	dbURL, clk := pgtest.NewDatabase(t), &clock{now: noon}
	s := newStack(t, dbURL, clk)
	o := newStack(t, dbURL, clk) // holds the row and watches the locks, on connections of its own
	meta := eventstore.Metadata{}
	x, err := s.accounts.OpenAccount(ctx, "Held Co", "held@test.example", meta) // its first key is issued below
	if err != nil {
		t.Fatal(err)
	}
	y, keyY := fundedAccount(t, s, 0)

	release := holdAccount(t, o, x)
	issued := make(chan error, 1)
	go func() {
		_, err := s.accounts.IssueKey(ctx, x, meta)
		issued <- err
	}()
	waitForLockWaiter(t, o) // the key issue waits for x's row

	granted := make(chan error, 1)
	go func() {
		_, err := s.accounts.GrantBonus(ctx, "outage-queue", 10, "outage", meta)
		granted <- err
	}()
	grantDone := false
	for !grantDone && !grantAskingForKeyGrantLock(t, o) { // the grant is made, or waits for the key issue
		select {
		case err := <-granted:
			if err != nil {
				t.Fatal(err)
			}
			grantDone = true
		default:
			time.Sleep(5 * time.Millisecond)
		}
	}

	revoked := make(chan error, 1)
	go func() { revoked <- s.accounts.RevokeKey(ctx, y, keyY.KeyID, "compromised", meta) }()
	var revokeErr error
	held := false
wait:
	for {
		select {
		case revokeErr = <-revoked:
			break wait
		default:
		}
		if advisoryWaiter(t, o, "ShareLock") {
			held = true
			break wait
		}
		time.Sleep(5 * time.Millisecond)
	}
	release()
	if held {
		revokeErr = <-revoked
		t.Errorf("the revoke of account %s's key waited for the grant, which waited for a key issue waiting for account %s's held row: "+
			"it could return only once that row was let go", y, x)
	}
	if revokeErr != nil {
		t.Fatal(revokeErr)
	}
	if err := <-issued; err != nil {
		t.Fatal(err)
	}
	if !grantDone {
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
	}
	// The grant reached x: its key issue was asked for before the grant and waited for. Not y:
	// its key was revoked before the grant's moment (the revoke returned while the grant waited).
	if b := ledgerOf(t, s, x).balance; b != 10 {
		t.Errorf("x's balance %d, want the grant's 10", b)
	}
	if b := ledgerOf(t, s, y).balance; b != 0 && !held {
		t.Errorf("y's balance %d, want 0: its only key was revoked before the grant was made", b)
	}
	auditClean(t, s.pool)
}

// A grant waiting for a key change in progress is not overtaken by key changes asked for
// meanwhile: they yield to it (docs/api.md, "Bonus grants"), so a stream of key changes that
// keep overlapping cannot keep it waiting for good. Here the key change in progress waits on
// its account's held row; a key issued to another account while the grant waits is recorded
// after the grant, once the held row is let go, and the grant does not reach that account.
func TestAKeyChangeAskedForWhileAGrantWaitsIsRecordedAfterTheGrant(t *testing.T) {
	defer commands.SetKeyChangeYield(time.Minute)() // longer than this test: it yields until the grant is made
	dbURL, clk := pgtest.NewDatabase(t), &clock{now: noon}
	s := newStack(t, dbURL, clk)
	o := newStack(t, dbURL, clk)
	meta := eventstore.Metadata{}
	x, err := s.accounts.OpenAccount(ctx, "Held Co", "held@test.example", meta)
	if err != nil {
		t.Fatal(err)
	}
	z, err := s.accounts.OpenAccount(ctx, "Late Co", "late@test.example", meta)
	if err != nil {
		t.Fatal(err)
	}
	release := holdAccount(t, o, x)
	issuedX := make(chan error, 1)
	go func() {
		_, err := s.accounts.IssueKey(ctx, x, meta)
		issuedX <- err
	}()
	waitForLockWaiter(t, o) // x's key issue holds the key/grant lock shared and waits for x's row
	granted := make(chan error, 1)
	go func() {
		_, err := s.accounts.GrantBonus(ctx, "outage-overtaken", 10, "outage", meta)
		granted <- err
	}()
	// The grant queues for the pending-grant lock behind x's key issue.
	waitFor(t, o, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND objid = 72100022 AND mode = 'ExclusiveLock')`)
	issuedZ := make(chan error, 1)
	go func() {
		_, err := s.accounts.IssueKey(ctx, z, meta)
		issuedZ <- err
	}()
	// z's key issue yields to the grant: it is not recorded while the grant waits.
	for yielding := false; !yielding; {
		select {
		case err := <-issuedZ:
			release()
			t.Fatalf("z's key issue returned (%v) while the grant waited for x's", err)
		default:
		}
		// The pattern is a parameter: written into the query, it would match this poll's own
		// text, which an idle connection of the pool keeps showing once it ran there.
		if err := o.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
			AND pid <> pg_backend_pid() AND query LIKE $1)`, "%pg_try_advisory_xact_lock_shared%").Scan(&yielding); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	release()
	for _, c := range []chan error{issuedX, granted, issuedZ} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	if b := ledgerOf(t, s, x).balance; b != 10 {
		t.Errorf("x's balance %d, want the grant's 10: its key issue was asked for before the grant", b)
	}
	if b := ledgerOf(t, s, z).balance; b != 0 {
		t.Errorf("z's balance %d, want 0: its key was issued after the grant (it yielded to it)", b)
	}
	auditClean(t, s.pool)
}

// A grant is not starved by a stream of key changes that keep overlapping, even after it had
// to wait past the key changes' yield for one stuck on its account's row: the key changes that
// arrived meanwhile stopped yielding and take the key/grant lock in turn, as long as the stream
// lasts, unless the grant lets them through and queues afresh. Here every key change holds
// the lock about 100 ms and a new one comes every 30 ms; the stream stops only once the grant
// is made (or, were it starved, after starveGuard, and the test fails).
func TestAGrantIsNotStarvedByAStreamOfOverlappingKeyChanges(t *testing.T) {
	// starveGuard keeps a starved grant from hanging the suite; no timing is asserted.
	const starveGuard = 2 * time.Minute
	// Connections for every key change in flight.
	dbURL, clk := pgtest.NewDatabase(t)+"&pool_max_conns=80", &clock{now: noon}
	s := newStack(t, dbURL, clk)
	o := newStack(t, dbURL, clk)
	meta := eventstore.Metadata{}
	open := func() string {
		id, err := s.accounts.OpenAccount(ctx, "Stream Co", "stream@test.example", meta)
		if err != nil {
			t.Error(err)
		}
		return id
	}
	// One key change of the stream: its account's row is held until 100 ms after the key
	// change waits for it, holding the key/grant lock shared.
	keyChange := func(id string) {
		tx, err := o.pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		defer tx.Rollback(ctx)
		var pid int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM accounts WHERE account_id = $1 FOR UPDATE`, id).Scan(&pid); err != nil {
			t.Error(err)
			return
		}
		done := make(chan error, 1)
		go func() { _, err := s.accounts.IssueKey(ctx, id, meta); done <- err }()
		for blocked := false; !blocked; time.Sleep(3 * time.Millisecond) {
			if err := o.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, pid).Scan(&blocked); err != nil {
				t.Error(err)
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
		_ = tx.Rollback(ctx)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}

	x := open()
	release := holdAccount(t, o, x)
	issuedX := make(chan error, 1)
	go func() { _, err := s.accounts.IssueKey(ctx, x, meta); issuedX <- err }()
	waitForLockWaiter(t, o) // x's key change is stuck on its row

	stop, streamed := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	go func() {
		defer close(streamed)
		for start := time.Now(); time.Since(start) < starveGuard; time.Sleep(30 * time.Millisecond) {
			select {
			case <-stop:
				return
			default:
			}
			wg.Go(func() { keyChange(open()) }) // opened apart: opening them one by one would space them out
		}
	}()
	granted := make(chan error, 1)
	go func() {
		_, err := s.accounts.GrantBonus(ctx, "outage-stream", 10, "outage", meta)
		granted <- err
	}()
	// The grant waits for x's key change past the yield of the key changes arriving meanwhile.
	time.Sleep(2 * commands.KeyChangeYield())
	release()
	if err := <-issuedX; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatal(err)
		}
	case <-streamed:
		t.Errorf("the grant was not made in %v of overlapping key changes", starveGuard)
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-streamed
	wg.Wait()
	if b := ledgerOf(t, s, x).balance; b != 10 {
		t.Errorf("x's balance %d, want the grant's 10: its key issue was asked for before the grant", b)
	}
	auditClean(t, s.pool)
}

// waitFor polls query (one boolean) until it is true.
func waitFor(t *testing.T, s stack, query string) {
	t.Helper()
	for {
		var ok bool
		if err := s.pool.QueryRow(ctx, query).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// grantAskingForKeyGrantLock tells whether a grant is asking for keyGrantLock alone: its
// session's (last) statement takes it, waiting or not yet granted.
func grantAskingForKeyGrantLock(t *testing.T, s stack) bool {
	t.Helper()
	var asking bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
		AND pid <> pg_backend_pid() AND query LIKE '%advisory_xact_lock($1)%' AND state <> 'idle')`).Scan(&asking); err != nil {
		t.Fatal(err)
	}
	return asking
}

// advisoryWaiter tells whether a session waits for the key/grant advisory lock in mode.
func advisoryWaiter(t *testing.T, s stack, mode string) bool {
	t.Helper()
	var waiting bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND objid = 72100021
		AND mode = $1 AND NOT granted)`, mode).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	return waiting
}
