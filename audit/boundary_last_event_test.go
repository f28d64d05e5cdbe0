package audit_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
)

// Since migration 0020 a boundary records its last archived event, and the chain vouches for
// the balance it starts from (docs/operations.md, "Retention and archiving"). Only a boundary
// in a range archived before that migration may lack it: one archived since whose four
// last-event columns were set to NULL, so that credits minted at it (balance, totals and daily
// sums edited so that every archived sum still holds, with the account rows and read models to
// match) would pass for trusted, is a difference in the audit and in the verification of a
// digest. With the last event left in place the same mint is found (the control).
func TestABoundaryStrippedOfItsLastEventCannotHideMintedCredits(t *testing.T) {
	s := newArchivedStore(t)
	s.charge(t, s.hash1, "archived-1", nil)
	s.charge(t, s.hash1, "archived-2", nil)
	s.fill(t, 1000)
	s.archiveFirstPartition(t) // the account's whole history: it lives on in its boundary
	if d := s.audit(t, audit.Options{}); d != "" {
		t.Fatalf("consistent archived store: %s", d)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := audit.TakeDigest(ctx, s.pool, key, archivedStart.AddDate(0, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	verify := func() string {
		rep, err := audit.VerifyDigest(ctx, s.pool, digest, 2)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(rep.Differences, "\n")
	}
	if d := verify(); d != "" {
		t.Fatalf("digest of the consistent store: %s", d)
	}

	// 100,000 bonus credits nobody granted, on the archived day, with every sum kept.
	const minted = 100000
	day := domain.Day(archivedStart)
	s.exec(t, `UPDATE stream_boundaries b SET account = jsonb_set(b.account
			|| jsonb_build_object('balance', (b.account->>'balance')::bigint + $2, 'bonus_credits', (b.account->>'bonus_credits')::bigint + $2),
			'{days}', (SELECT jsonb_agg(CASE WHEN d->>'kind' = '' AND d->>'day' = $3
					THEN d || jsonb_build_object('balance_after', (d->>'balance_after')::bigint + $2) ELSE d END)
				FROM jsonb_array_elements(b.account->'days') d)
				|| jsonb_build_array(jsonb_build_object('day', $3::text, 'kind', 'bonus', 'count', 1, 'rows_paid', 0, 'rows_deduplicated', 0,
					'credits', $2, 'cents', 0, 'version', 0, 'balance_after', 0)))
		FROM streams st WHERE st.stream_no = b.stream_no AND st.stream_id = $1`, domain.AccountStream(s.account), minted, day)
	for _, table := range []string{"accounts", "rm_balances"} {
		s.exec(t, `UPDATE `+table+` SET balance = balance + $2, bonus_credits = bonus_credits + $2 WHERE account_id = $1`, s.account, minted)
	}
	s.exec(t, `UPDATE rm_account_days SET balance_after = balance_after + $3 WHERE account_id = $1 AND day = $2::date AND kind = ''`, s.account, day, minted)
	s.exec(t, `INSERT INTO rm_account_days (account_id, day, kind, count, credits) VALUES ($1, $2::date, 'bonus', 1, $3)`, s.account, day, minted)

	// Control: the boundary's last event vouches for the old balance.
	vouched := "account " + s.account + ": archived boundary v5: its state says balance"
	if d := s.audit(t, audit.Options{}); !strings.Contains(d, vouched) {
		t.Fatalf("control (last event kept): differences\n%s\nwant %q", d, vouched)
	}

	// The last event's columns set to NULL: the boundary now passes for one archived before 0020.
	s.exec(t, `UPDATE stream_boundaries b SET prev_hash = NULL, type = NULL, payload = NULL, metadata = NULL
		FROM streams st WHERE st.stream_no = b.stream_no AND st.stream_id = $1`, domain.AccountStream(s.account))
	var balance int64
	if err := s.pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE account_id = $1`, s.account).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	for _, o := range []audit.Options{{}, {AccountID: s.account}} {
		if d := s.audit(t, o); !strings.Contains(d, s.account) {
			t.Errorf("audit %q: differences\n%s\nwant one naming account %s, whose boundary (archived %s, after migration 0020) lost its last event "+
				"and now shows %d credits, %d of them minted", o.AccountID, d, s.account, time.Now().UTC().Format(time.DateOnly), balance, minted)
		}
	}
	if d := verify(); !strings.Contains(d, s.account) {
		t.Errorf("digest verification: differences\n%s\nwant one naming account %s", d, s.account)
	}
}
