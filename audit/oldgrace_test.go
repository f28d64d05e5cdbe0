package audit_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// Before c40c14f (before key numbers existed) Accounts.now was h.Clock().UTC(), not truncated:
// a rotation's grace_until was recorded in the KeyIssued payload with nanoseconds, while the
// api_keys row (timestamptz) kept microseconds. Such a consistent, migrated history must audit
// clean; the new row comparison reports the grace_until as different.
func TestAnOldRotationWhoseGraceHasNanosecondsAuditsClean(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	oldKey := keyOf(t, w, 1)
	now := noon.Add(time.Hour + 1234*time.Nanosecond) // a real clock's reading, as the old code kept it
	grace := now.Add(domain.GracePeriod)
	newKey := "key_oldstyle2"
	hash := domain.HashKey("svc_live_oldstyle")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		stream := domain.AccountStream(w.account)
		heads, err := eventstore.OpenHeads(ctx, tx, true, stream)
		if err != nil {
			return err
		}
		var balance int64
		if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE account_id = $1 FOR UPDATE`, w.account).Scan(&balance); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET state = 'grace', grace_until = $2 WHERE key_id = $1`, oldKey, grace); err != nil {
			return err
		}
		// key_no 2: as migration 0006 numbered it.
		if _, err := tx.Exec(ctx, `INSERT INTO api_keys (key_id, key_no, key_hash, account_id, last4, state, issued_at) VALUES ($1, 2, $2, $3, 'abcd', 'active', $4)`,
			newKey, hash[:], w.account, now); err != nil {
			return err
		}
		g := grace
		_, err = eventstore.Append(ctx, tx, heads[stream], now, eventstore.NewEvent{Type: domain.EventKeyIssued, Payload: domain.KeyIssued{
			AccountID: w.account, KeyID: newKey, KeyHash: hex.EncodeToString(hash[:]), Last4: "abcd", RotatedKeyID: oldKey, GraceUntil: &g,
			Ledger: domain.Ledger{BalanceAfter: balance}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	catchUp(t, pool)
	for _, o := range []audit.Options{{}, {AccountID: w.account}} {
		if rep, out := run(t, pool, o); len(rep.Differences) != 0 {
			t.Errorf("audit %q of a consistent pre-key-number rotation: %s", o.AccountID, strings.TrimSpace(out))
		}
	}
}
