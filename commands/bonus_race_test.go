package commands_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

func waitForSQL(t *testing.T, pool *pgxpool.Pool, what, sql string, args ...any) {
	t.Helper()
	for i := 0; ; i++ {
		var ok bool
		if err := pool.QueryRow(ctx, sql, args...).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if i > 20000 {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A key change is recorded later than every granted_at already recorded, so that a key change
// a grant did not see is never recorded at or before the grant's instant (docs/api.md, "Bonus
// grants"). Here the key change waits on the grant's lock, on a process whose clock is 5 ms
// behind: it must read the grant committed while it waited, and record its key after it, or
// the grant would credit an account that had no key when it was asked for.
func TestAKeyIssuedWhileAGrantStartsIsRecordedAfterItAndNotEligible(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	gClock := &clock{now: noon}
	kClock := &clock{now: noon.Add(-5 * time.Millisecond)}
	g := newStack(t, dbURL, gClock) // the process asked for the grant
	k := newStack(t, dbURL, kClock) // the process issuing a key, its clock 5 ms behind

	kClock.Advance(-time.Hour)
	other, _ := fundedAccount(t, k, 0) // has a key well before the outage grant
	kClock.Advance(time.Hour)
	late, err := k.accounts.OpenAccount(ctx, "Late Co", "late@test.example", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}

	// X holds the grant's row uncommitted, so the grant waits in its first transaction while
	// holding keyGrantLock; Z holds the eligible account's row, so the grant's first chunk waits.
	x, err := g.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Rollback(ctx)
	if _, err := x.Exec(ctx, `INSERT INTO bonus_grants (outage_id, credits, reason, accounts, granted_at, state)
		VALUES ('outage-7', 100, 'x', 0, $1, 'running')`, noon); err != nil {
		t.Fatal(err)
	}
	z, err := g.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Rollback(ctx)
	if _, err := z.Exec(ctx, `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, other); err != nil {
		t.Fatal(err)
	}

	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	grantDone := make(chan error, 1)
	go func() {
		_, err := g.accounts.GrantBonus(gctx, "outage-7", 100, "outage", eventstore.Metadata{})
		grantDone <- err
	}()
	waitForSQL(t, g.pool, "the grant holds keyGrantLock", `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND objid = 72100021 AND mode = 'ExclusiveLock' AND granted)`)
	issueDone := make(chan error, 1)
	go func() {
		_, err := k.accounts.IssueKey(ctx, late, eventstore.Metadata{})
		issueDone <- err
	}()
	waitForSQL(t, g.pool, "the key issue waits for keyGrantLock", `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND objid = 72100021 AND mode = 'ShareLock' AND NOT granted)`)
	if err := x.Rollback(ctx); err != nil { // the grant records its instant and commits; the key issue goes on
		t.Fatal(err)
	}
	if err := <-issueDone; err != nil {
		t.Fatal(err)
	}
	// The grant's first chunk waits for Z: cut the grant short there, then ask again (a crash,
	// a timeout: docs say asking again finishes it).
	waitForSQL(t, g.pool, "the first chunk waits for the locked account", `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%' AND query LIKE '%ANY%')`)
	cancel()
	if err := <-grantDone; err == nil || !errors.Is(err, context.Canceled) && gctx.Err() == nil {
		t.Fatalf("the cut-short grant: %v", err)
	}
	_ = z.Rollback(ctx)
	if _, err := g.accounts.GrantBonus(ctx, "outage-7", 100, "outage", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}

	var grantedAt, issuedAt time.Time
	if err := g.pool.QueryRow(ctx, `SELECT granted_at FROM bonus_grants WHERE outage_id = 'outage-7'`).Scan(&grantedAt); err != nil {
		t.Fatal(err)
	}
	if err := g.pool.QueryRow(ctx, `SELECT issued_at FROM api_keys WHERE account_id = $1`, late).Scan(&issuedAt); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	if bal := ledgerOf(t, g, other).balance; bal != 100 {
		t.Errorf("the account with a key before the grant: balance %d, want 100", bal)
	}
	if bal := ledgerOf(t, g, late).balance; bal != 0 {
		t.Errorf("an account whose first key was issued after the grant was asked for (and committed after it) got the bonus: "+
			"balance %d, want 0; key issued_at %s, granted_at %s", bal, issuedAt.UTC().Format(time.RFC3339Nano), grantedAt.UTC().Format(time.RFC3339Nano))
	}
}

// The mirror image: key changes that committed before the grant was asked for, on a process
// whose clock is 5 ms ahead of the granting one. The grant's instant is never before them, so
// the key issued there is eligible and the key revoked there is not.
func TestKeyChangesCommittedBeforeAGrantOnAFasterClockAreSeenByIt(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	gClock := &clock{now: noon}
	kClock := &clock{now: noon.Add(5 * time.Millisecond)}
	g := newStack(t, dbURL, gClock) // asked for the grant
	k := newStack(t, dbURL, kClock) // changes keys, its clock ahead

	issued, _ := fundedAccount(t, k, 0) // its only key issued (and committed) before the grant
	kClock.Advance(-time.Hour)
	gone, key := fundedAccount(t, k, 0) // a key an hour old...
	kClock.Advance(time.Hour)
	if err := k.accounts.RevokeKey(ctx, gone, key.KeyID, "compromised", eventstore.Metadata{}); err != nil {
		t.Fatal(err) // ...revoked (and committed) before the grant
	}
	if _, err := g.accounts.GrantBonus(ctx, "outage-skew", 100, "outage", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if b := ledgerOf(t, g, issued).balance; b != 100 {
		t.Errorf("an account whose key was issued before the grant was asked for has %d credits, want 100", b)
	}
	if b := ledgerOf(t, g, gone).balance; b != 0 {
		t.Errorf("an account whose only key was revoked before the grant was asked for has %d credits, want 0", b)
	}
}
