package commands_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// keyFacts counts the account's ledger facts, and its KeyRevoked facts for keyID.
func keyFacts(t *testing.T, s stack, accountID, keyID string) (facts, revoked int) {
	t.Helper()
	page, err := s.views.Ledger(ctx, accountID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page {
		facts++
		if e.Type == domain.EventKeyRevoked {
			var p struct {
				KeyID string `json:"key_id"`
			}
			if err := json.Unmarshal(e.Payload, &p); err != nil || p.KeyID == keyID {
				revoked++
			}
		}
	}
	return facts, revoked
}

func keyStateInView(t *testing.T, s stack, accountID, keyID string) domain.KeyState {
	t.Helper()
	v, err := s.views.Account(ctx, accountID, s.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range v.Keys {
		if k.KeyID == keyID {
			return k.State
		}
	}
	t.Fatalf("key %s not in the account view", keyID)
	return ""
}

// Revoking a key that is already revoked "changes nothing and succeeds" (commands.RevokeKey).
// A revoked key stays revoked and its revocation is one fact.
func TestRevokingARevokedKeyAgainChangesNothing(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	accountID, k := fundedAccount(t, s, 500)
	if err := s.accounts.RevokeKey(ctx, accountID, k.KeyID, "compromised", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	facts, revoked := keyFacts(t, s, accountID, k.KeyID)
	clk.Advance(time.Minute)
	if err := s.accounts.RevokeKey(ctx, accountID, k.KeyID, "again", eventstore.Metadata{}); err != nil {
		t.Fatalf("second revoke: %v", err)
	}
	if f, r := keyFacts(t, s, accountID, k.KeyID); f != facts || r != revoked || r != 1 {
		t.Errorf("after a second revoke: %d facts (%d KeyRevoked); before it %d (%d)", f, r, facts, revoked)
	}
	if _, err := s.meter.Authenticate(ctx, domain.HashKey(k.APIKey)); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Errorf("revoked key: %v", err)
	}
	// An unknown key, or a key of another account, is not found.
	other, _ := fundedAccount(t, s, 0)
	if err := s.accounts.RevokeKey(ctx, other, k.KeyID, "", eventstore.Metadata{}); !errors.Is(err, domain.ErrKeyNotFound) {
		t.Errorf("revoking another account's key: %v, want ErrKeyNotFound", err)
	}
	auditClean(t, s.pool)
}

// A rotated key whose grace has passed is revoked: it no longer works and every view shows it
// as "revoked" (docs/api.md, "Keys"; docs/architecture.md, "Grace expiry is not an event").
// Revoking it is revoking a revoked key, which changes nothing, just as rotating again does
// not revoke it a second time (domain.PlanKeyIssue decides from StateAt). RevokeKey decides
// from the key's state at the instant of the revocation, not from the row's stored state
// ('grace'): no KeyRevoked fact, and no revoked_at after the key had already stopped working.
func TestRevokingAKeyPastItsGraceChangesNothing(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	accountID, k1 := fundedAccount(t, s, 500)
	if _, err := s.accounts.IssueKey(ctx, accountID, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(25 * time.Hour)
	if _, err := s.meter.Authenticate(ctx, domain.HashKey(k1.APIKey)); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("k1 25 h after its rotation: %v, want revoked", err)
	}
	if st := keyStateInView(t, s, accountID, k1.KeyID); st != domain.KeyStateRevoked {
		t.Fatalf("k1 25 h after its rotation shows as %q", st)
	}
	facts, revoked := keyFacts(t, s, accountID, k1.KeyID)
	var revokedAtBefore *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT revoked_at FROM api_keys WHERE key_id = $1`, k1.KeyID).Scan(&revokedAtBefore); err != nil {
		t.Fatal(err)
	}

	if err := s.accounts.RevokeKey(ctx, accountID, k1.KeyID, "cleanup", eventstore.Metadata{}); err != nil {
		t.Fatalf("revoke of a key past its grace: %v", err)
	}
	f, r := keyFacts(t, s, accountID, k1.KeyID)
	var revokedAt *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT revoked_at FROM api_keys WHERE key_id = $1`, k1.KeyID).Scan(&revokedAt); err != nil {
		t.Fatal(err)
	}
	if f != facts || r != revoked {
		t.Errorf("revoking a key already revoked by the end of its grace appended %d fact(s) (%d KeyRevoked; before %d); want none, as for any revoked key",
			f-facts, r, revoked)
	}
	if (revokedAtBefore == nil) != (revokedAt == nil) {
		t.Errorf("revoked_at moved from %v to %v", revokedAtBefore, revokedAt)
	}
	auditClean(t, s.pool)
}

// A key change that waits for its account's row (held by a charge, another key change, an
// operator's open transaction) is decided and recorded at the instant it gets the row, not at
// the instant it was asked for (docs/api.md, "Keys"): a revoke that waited past a rotated key's
// grace end finds the key already revoked and records nothing, and a rotation that waited
// starts the 24 hours of grace when it is recorded, losing none of them.
func TestAKeyChangeThatWaitedForItsAccountsRowIsDecidedWhenItGetsIt(t *testing.T) {
	dbURL, clk := pgtest.NewDatabase(t), &clock{now: noon}
	s := newStack(t, dbURL, clk)
	o := newStack(t, dbURL, clk) // holds the row and watches the locks, on connections of its own
	accountID, k1 := fundedAccount(t, s, 500)
	if _, err := s.accounts.IssueKey(ctx, accountID, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(24*time.Hour - time.Minute) // k1 is in the last minute of its grace
	facts, _ := keyFacts(t, s, accountID, k1.KeyID)

	release := holdAccount(t, o, accountID)
	revoked := make(chan error, 1)
	go func() { revoked <- s.accounts.RevokeKey(ctx, accountID, k1.KeyID, "cleanup", eventstore.Metadata{}) }()
	waitForTheAccountRow(t, o, revoked)
	clk.Advance(2 * time.Minute) // the grace ends while the revoke waits
	release()
	if err := <-revoked; err != nil {
		t.Fatal(err)
	}
	var revokedAt *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT revoked_at FROM api_keys WHERE key_id = $1`, k1.KeyID).Scan(&revokedAt); err != nil {
		t.Fatal(err)
	}
	if f, r := keyFacts(t, s, accountID, k1.KeyID); f != facts || r != 0 || revokedAt != nil {
		t.Errorf("a revoke that got the row after k1's grace ended appended %d fact(s) (%d KeyRevoked of k1) and set revoked_at %v; "+
			"want none: k1 was already revoked when the revoke was made", f-facts, r, revokedAt)
	}

	release = holdAccount(t, o, accountID)
	type answer struct {
		graceUntil *time.Time
		err        error
	}
	rotated := make(chan answer, 1)
	go func() {
		k, err := s.accounts.IssueKey(ctx, accountID, eventstore.Metadata{})
		rotated <- answer{k.GraceUntil, err}
	}()
	waitForTheAccountRow(t, o, rotated)
	clk.Advance(time.Hour)
	gotRow := clk.Now()
	release()
	a := <-rotated
	if a.err != nil {
		t.Fatal(a.err)
	}
	if want := gotRow.Add(24 * time.Hour); a.graceUntil == nil || !a.graceUntil.Equal(want) {
		t.Errorf("a rotation that waited an hour for the row has grace until %v; want %v, 24 h after it was recorded", a.graceUntil, want)
	}
	auditClean(t, s.pool)
}

// waitForTheAccountRow returns once a session waits for an account's row lock; the call that
// should be that session failing the test if it answers first, without having waited.
func waitForTheAccountRow[T any](t *testing.T, o stack, answered <-chan T) {
	t.Helper()
	for {
		select {
		case a := <-answered:
			t.Fatalf("the key change answered %+v without waiting for its account's held row", a)
		default:
		}
		if lockWaiter(t, o, "%FROM accounts WHERE account_id%FOR UPDATE%") {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Every account command is recorded at the instant it holds the account, not when it was
// asked: a purchase or a rate limit that waited for the account's row (an operator's open
// transaction, a hung command) is dated when it got it. Dated when it was asked, it would
// land after a digest taken meanwhile yet carry a time before it, and a bonus the same.
func TestAnAccountCommandThatWaitedForItsRowIsDatedWhenItGotIt(t *testing.T) {
	dbURL, clk := pgtest.NewDatabase(t), &clock{now: noon}
	s := newStack(t, dbURL, clk)
	o := newStack(t, dbURL, clk) // holds the row and watches the locks, on connections of its own
	accountID, _ := fundedAccount(t, s, 500)
	perMinute := int64(5)
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"purchase", func() error {
			_, err := s.accounts.Purchase(ctx, accountID, 500, "pay-after-a-wait", eventstore.Metadata{})
			return err
		}},
		{"rate limit", func() error { return s.accounts.SetRateLimit(ctx, accountID, &perMinute, eventstore.Metadata{}) }},
	} {
		release := holdAccount(t, o, accountID)
		done := make(chan error, 1)
		go func() { done <- c.run() }()
		waitForTheAccountRow(t, o, done)
		clk.Advance(time.Hour) // the wait
		got := clk.Now()
		release()
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var at time.Time
		if err := s.pool.QueryRow(ctx, `SELECT head_at FROM streams WHERE stream_id = $1`, domain.AccountStream(accountID)).Scan(&at); err != nil {
			t.Fatal(err)
		}
		if !at.Equal(got) {
			t.Errorf("%s that got its account's row at %s is recorded at %s", c.name, got, at)
		}
	}
}
