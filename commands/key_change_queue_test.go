package commands_test

import (
	"testing"
	"time"

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
