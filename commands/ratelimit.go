package commands

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// SetRateLimit sets the request cap per minute of every key of an account; nil returns it to
// the server's default. The RateLimitSet event and the accounts row change together, and
// every serving process hears of it on KeysChangedChannel: its key cache forgets the account,
// so its next request of any of the account's keys reads the new limit (no restart, no expiry
// wait): at once on this process, on the others once the notification arrives (docs/api.md).
func (h Accounts) SetRateLimit(ctx context.Context, accountID string, perMinute *int64, meta eventstore.Metadata) error {
	if err := domain.ValidateRateLimit(perMinute); err != nil {
		return err
	}
	return h.keysChanged(accountID, h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		a, err := lockAccount(ctx, tx, accountID)
		if err != nil {
			return err
		}
		now := h.now() // once it holds the account, as every account command
		if _, err := tx.Exec(ctx, `UPDATE accounts SET rate_limit_per_minute = $2 WHERE account_id = $1`, accountID, perMinute); err != nil {
			return err
		}
		if _, err := appendToAccount(ctx, tx, a, now, a.balance, totals{}, eventstore.NewEvent{Type: domain.EventRateLimitSet, Metadata: meta,
			Payload: domain.RateLimitSet{AccountID: accountID, RequestsPerMinute: perMinute, Ledger: domain.Ledger{BalanceAfter: a.balance}}}); err != nil {
			return err
		}
		return announceKeysChanged(ctx, tx, accountID)
	}))
}
