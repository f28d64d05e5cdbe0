package commands_test

import (
	"context"
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A grant's eligibility is a key usable at the grant's instant, and docs/api.md ("Admin API",
// bonus grants) promises that the ledger's times and the grant agree. A key change is recorded
// at the later of its command's clock and its account stream's newest fact: when a process
// whose clock runs ahead wrote the account's last fact, the KeyIssued or KeyRevoked is dated
// after the clock of the process that made it. Its api_keys row, which the grant reads, must
// carry that same time, or a grant asked for after the change committed is dated before the
// change as the ledger shows it: an account credited although its ledger shows its only key
// issued after the grant, and one refused although its ledger shows its key revoked after it.
func TestAGrantAgreesWithTheLedgerTimesOfKeyChangesDatedByAnotherProcesssClock(t *testing.T) {
	db := pgtest.NewDatabase(t)
	aheadClock := &clock{now: noon.Add(-time.Hour)}
	behindClock := &clock{now: noon.Add(-time.Hour)}
	ahead := newStack(t, db, aheadClock)
	behind := newStack(t, db, behindClock)

	revoked, key := fundedAccount(t, behind, 0) // a key since 11:00
	issued, err := behind.accounts.OpenAccount(ctx, "No Key Yet", "ops@test.example", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	aheadClock.now, behindClock.now = noon.Add(5*time.Millisecond), noon
	for _, id := range []string{revoked, issued} {
		// The process whose clock runs 5 ms ahead records a purchase on each account.
		if _, err := ahead.accounts.Purchase(ctx, id, 500, "pay-"+id, eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	// The process behind revokes the one account's key and issues the other's first key; both
	// commit before the grant is asked for, 1 ms later by its clock.
	if err := behind.accounts.RevokeKey(ctx, revoked, key.KeyID, "", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if _, err := behind.accounts.IssueKey(ctx, issued, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	behindClock.Advance(time.Millisecond)
	if _, err := behind.accounts.GrantBonus(ctx, "outage-skew", 100, "outage", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	g, err := behind.accounts.Grant(ctx, "outage-skew")
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		account, keyFact string
	}{{revoked, domain.EventKeyRevoked}, {issued, domain.EventKeyIssued}} {
		entries, err := behind.views.Ledger(ctx, c.account, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var fact time.Time
		credited := false
		for _, e := range entries {
			switch e.Type {
			case c.keyFact:
				fact = e.RecordedAt
			case domain.EventBonusGranted:
				credited = true
			}
		}
		// By the ledger: a key issued at or before the grant's instant, or revoked after it,
		// was usable then.
		usable := c.keyFact == domain.EventKeyIssued && !fact.After(g.GrantedAt) || c.keyFact == domain.EventKeyRevoked && fact.After(g.GrantedAt)
		if credited != usable {
			t.Errorf("account %s: credited %v by the grant at %s; its ledger records its %s at %s (key usable then by the ledger: %v)",
				c.account, credited, g.GrantedAt.Format(time.RFC3339Nano), c.keyFact, fact.Format(time.RFC3339Nano), usable)
		}
	}
	auditClean(t, behind.pool)
}

// A grant's BonusGranted facts are recorded no earlier than the grant's instant, whichever
// process runs its chunks: here the grant is asked for on a process whose clock runs 5 ms
// ahead, cut short while its first chunk waits for a held account, and finished by asking
// again on a process whose clock is behind. Dated by that clock, the bonus would be in the
// account's balance-at for instants before the grant was asked for.
func TestABonusIsNeverRecordedBeforeItsGrantsInstant(t *testing.T) {
	db := pgtest.NewDatabase(t)
	aheadClock := &clock{now: noon.Add(-time.Hour)}
	behindClock := &clock{now: noon.Add(-time.Hour)}
	ahead := newStack(t, db, aheadClock)
	behind := newStack(t, db, behindClock)
	accountID, _ := fundedAccount(t, behind, 0)
	aheadClock.now, behindClock.now = noon.Add(5*time.Millisecond), noon

	z, err := behind.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Rollback(ctx)
	if _, err := z.Exec(ctx, `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, accountID); err != nil {
		t.Fatal(err)
	}
	cut, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := ahead.accounts.GrantBonus(cut, "outage-late", 100, "outage", eventstore.Metadata{})
		done <- err
	}()
	waitForSQL(t, behind.pool, "the grant's chunk waits for the held account", `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%' AND query LIKE '%ANY%')`)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the grant cut short finished")
	}
	_ = z.Rollback(ctx)
	behindClock.Advance(time.Millisecond)
	if _, err := behind.accounts.GrantBonus(ctx, "outage-late", 100, "outage", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	g, err := behind.accounts.Grant(ctx, "outage-late")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := behind.views.Ledger(ctx, accountID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range entries {
		if e.Type == domain.EventBonusGranted {
			found = true
			if e.RecordedAt.Before(g.GrantedAt) {
				t.Errorf("the bonus is recorded at %s, before its grant's instant %s", e.RecordedAt.Format(time.RFC3339Nano), g.GrantedAt.Format(time.RFC3339Nano))
			}
		}
	}
	if !found {
		t.Fatal("the account was not credited")
	}
	if g.FinishedAt == nil || g.FinishedAt.Before(g.GrantedAt) {
		t.Errorf("the grant asked for at %s finished at %v", g.GrantedAt.Format(time.RFC3339Nano), g.FinishedAt)
	}
	auditClean(t, behind.pool)
}
