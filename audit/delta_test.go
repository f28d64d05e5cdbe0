package audit_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// A fact whose balance arithmetic adds up (balance_after = the balance before + credits_delta,
// the chain intact, the account row moved with it) but whose kind may not move the balance as
// it does: credits no purchase, bonus or charge explains. The audit reports it at once, and
// kyapi archive refuses to archive it (after which only the archived sums would show it).
func TestAFactMovingTheBalanceAsItsKindMayNotIsADifference(t *testing.T) {
	for _, c := range []struct {
		name string
		fact func(account string, balance int64) (string, any, int64)
	}{
		{"a rate-limit change minting credits", func(account string, balance int64) (string, any, int64) {
			return domain.EventRateLimitSet, domain.RateLimitSet{AccountID: account,
				Ledger: domain.Ledger{CreditsDelta: 100000, BalanceAfter: balance + 100000}}, 100000
		}},
		{"a purchase taking credits", func(account string, balance int64) (string, any, int64) {
			return domain.EventCreditsPurchased, domain.CreditsPurchased{AccountID: account, PaymentRef: "refund-" + account,
				AmountCents: 0, Credits: -500, Ledger: domain.Ledger{CreditsDelta: -500, BalanceAfter: balance - 500}}, -500
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newArchivedStore(t) // 1,000 credits after its purchase
			var moved int64
			var typ string
			err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				var no int32
				var balance int64
				if err := tx.QueryRow(ctx, `SELECT stream_no, balance FROM accounts WHERE account_id = $1 FOR UPDATE`, s.account).Scan(&no, &balance); err != nil {
					return err
				}
				heads, err := eventstore.HeadsByNo(ctx, tx, no)
				if err != nil {
					return err
				}
				var payload any
				typ, payload, moved = c.fact(s.account, balance)
				if _, err := eventstore.Append(ctx, tx, heads[no], s.now(), eventstore.NewEvent{Type: typ, Payload: payload}); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE account_id = $1`, s.account, moved)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			s.catchUp(t)
			if d := s.audit(t, audit.Options{}); !strings.Contains(d, s.account) || !strings.Contains(d, "a "+typ) {
				t.Errorf("the audit of an account whose balance moved %+d without a purchase, bonus or charge to explain it reports %q", moved, d)
			}
			s.fill(t, 1000)
			s.catchUp(t)
			parts, err := eventstore.Partitions(ctx, s.pool)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := archive.Archive(ctx, s.pool, s.archiveOptions(t, parts[0])); err == nil || !strings.Contains(err.Error(), "a "+typ) {
				t.Errorf("archiving that history: %v, want a refusal naming the fact", err)
			}
		})
	}
}
