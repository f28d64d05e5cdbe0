package commands

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// Accounts handles the operator commands on accounts, keys and credits.
type Accounts struct {
	Store *eventstore.Store
	Clock func() time.Time
	// Rand feeds key and id generation; crypto/rand when nil.
	Rand io.Reader
}

func (h Accounts) now() time.Time { return h.Clock().UTC() }

func (h Accounts) newID(prefix string) (string, error) {
	r := h.Rand
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, 10)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return prefix + hex.EncodeToString(b), nil
}

// account is the locked head of an account: its balance and stream version.
type account struct {
	id      string
	balance int64
	version int64
}

func lockAccount(ctx context.Context, tx pgx.Tx, id string) (account, error) {
	a := account{id: id}
	err := tx.QueryRow(ctx, `SELECT balance, version FROM accounts WHERE account_id = $1 FOR UPDATE`, id).Scan(&a.balance, &a.version)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, domain.ErrAccountNotFound
	}
	return a, err
}

// appendToAccount appends account events and moves the head to the new version and balance.
func (h Accounts) appendToAccount(ctx context.Context, tx pgx.Tx, a account, balance int64, at time.Time, events ...eventstore.NewEvent) error {
	v, err := h.Store.Append(ctx, tx, domain.AccountStream(a.id), a.version, at, events...)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE accounts SET version = $2, balance = $3 WHERE account_id = $1`, a.id, v, balance)
	return err
}

// OpenAccount opens an account with a zero balance.
func (h Accounts) OpenAccount(ctx context.Context, name, email string, meta eventstore.Metadata) (string, error) {
	name, email = strings.TrimSpace(name), strings.TrimSpace(email)
	if name == "" || len(name) > 200 {
		return "", &domain.ValidationError{Field: "name", Message: "is required (at most 200 characters)"}
	}
	if addr, err := mail.ParseAddress(email); err != nil || addr.Address != email || len(email) > 254 {
		return "", &domain.ValidationError{Field: "email", Message: "must be a plain e-mail address"}
	}
	id, err := h.newID("acc_")
	if err != nil {
		return "", err
	}
	now := h.now()
	err = h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO accounts (account_id, name, email, balance, version, opened_at) VALUES ($1, $2, $3, 0, 0, $4)`,
			id, name, email, now); err != nil {
			return err
		}
		return h.appendToAccount(ctx, tx, account{id: id}, 0, now, eventstore.NewEvent{
			Type: domain.EventAccountOpened, Metadata: meta,
			Payload: domain.AccountOpened{AccountID: id, Name: name, Email: email},
		})
	})
	return id, err
}

// IssuedKey is the answer to IssueKey; APIKey is the only time the full key is ever shown.
type IssuedKey struct {
	KeyID        string     `json:"key_id"`
	APIKey       string     `json:"api_key"`
	Prefix       string     `json:"prefix"`
	Last4        string     `json:"last4"`
	RotatedKeyID *string    `json:"rotated_key_id"`
	GraceUntil   *time.Time `json:"grace_until"`
}

// IssueKey issues a new key; an existing active key enters its 24-hour grace and a key
// already in grace is revoked at once.
func (h Accounts) IssueKey(ctx context.Context, accountID string, meta eventstore.Metadata) (IssuedKey, error) {
	key, err := domain.NewKey(h.Rand)
	if err != nil {
		return IssuedKey{}, err
	}
	keyID, err := h.newID("key_")
	if err != nil {
		return IssuedKey{}, err
	}
	hash := domain.HashKey(key)
	out := IssuedKey{KeyID: keyID, APIKey: key, Prefix: domain.KeyPrefix, Last4: domain.Last4(key)}
	now := h.now()
	err = h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		a, err := lockAccount(ctx, tx, accountID)
		if err != nil {
			return err
		}
		keys, err := loadKeys(ctx, tx, accountID)
		if err != nil {
			return err
		}
		plan := domain.PlanKeyIssue(keys, now)
		var events []eventstore.NewEvent
		for _, k := range plan.Revoked {
			if _, err := tx.Exec(ctx, `UPDATE api_keys SET state = 'revoked', revoked_at = $2 WHERE key_id = $1`, k.ID, now); err != nil {
				return err
			}
			events = append(events, eventstore.NewEvent{Type: domain.EventKeyRevoked, Metadata: meta, Payload: domain.KeyRevoked{
				AccountID: accountID, KeyID: k.ID, Reason: "superseded by a second rotation during grace",
				Ledger: domain.Ledger{BalanceAfter: a.balance}}})
		}
		issued := domain.KeyIssued{AccountID: accountID, KeyID: keyID, KeyHash: hex.EncodeToString(hash[:]), Last4: out.Last4,
			Ledger: domain.Ledger{BalanceAfter: a.balance}}
		if plan.Rotated != nil {
			grace := plan.GraceUntil
			if _, err := tx.Exec(ctx, `UPDATE api_keys SET state = 'grace', grace_until = $2 WHERE key_id = $1`, plan.Rotated.ID, grace); err != nil {
				return err
			}
			issued.RotatedKeyID, issued.GraceUntil = plan.Rotated.ID, &grace
			out.RotatedKeyID, out.GraceUntil = &plan.Rotated.ID, &grace
		}
		if _, err := tx.Exec(ctx, `INSERT INTO api_keys (key_id, key_hash, account_id, last4, state, issued_at) VALUES ($1, $2, $3, $4, 'active', $5)`,
			keyID, hash[:], accountID, out.Last4, now); err != nil {
			return err
		}
		events = append(events, eventstore.NewEvent{Type: domain.EventKeyIssued, Metadata: meta, Payload: issued})
		return h.appendToAccount(ctx, tx, a, a.balance, now, events...)
	})
	if err != nil {
		return IssuedKey{}, err
	}
	return out, nil
}

func loadKeys(ctx context.Context, tx pgx.Tx, accountID string) ([]domain.Key, error) {
	rows, err := tx.Query(ctx, `SELECT key_id, last4, state, issued_at, grace_until FROM api_keys WHERE account_id = $1 ORDER BY issued_at, key_id`, accountID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []domain.Key
	for rows.Next() {
		k := domain.Key{AccountID: accountID}
		if err := rows.Scan(&k.ID, &k.Last4, &k.State, &k.IssuedAt, &k.GraceUntil); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// RevokeKey revokes a key at once. Revoking a revoked key changes nothing and succeeds.
func (h Accounts) RevokeKey(ctx context.Context, accountID, keyID, reason string, meta eventstore.Metadata) error {
	if len(reason) > 500 {
		return &domain.ValidationError{Field: "reason", Message: "at most 500 characters"}
	}
	now := h.now()
	return h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		a, err := lockAccount(ctx, tx, accountID)
		if err != nil {
			return err
		}
		var state domain.KeyState
		var grace *time.Time
		err = tx.QueryRow(ctx, `SELECT state, grace_until FROM api_keys WHERE key_id = $1 AND account_id = $2`, keyID, accountID).Scan(&state, &grace)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.ErrKeyNotFound
		}
		if err != nil {
			return err
		}
		if state == domain.KeyStateRevoked {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET state = 'revoked', revoked_at = $2 WHERE key_id = $1`, keyID, now); err != nil {
			return err
		}
		return h.appendToAccount(ctx, tx, a, a.balance, now, eventstore.NewEvent{Type: domain.EventKeyRevoked, Metadata: meta,
			Payload: domain.KeyRevoked{AccountID: accountID, KeyID: keyID, Reason: reason, Ledger: domain.Ledger{BalanceAfter: a.balance}}})
	})
}

// PurchaseResult is the answer to Purchase. Replayed is true when the payment_ref was seen
// before: nothing was added and the first answer is returned.
type PurchaseResult struct {
	CreditsAdded int64 `json:"credits_added"`
	Balance      int64 `json:"balance"`
	Replayed     bool  `json:"-"`
}

// Purchase adds the credits bought with amountCents, once per paymentRef.
func (h Accounts) Purchase(ctx context.Context, accountID string, amountCents int64, paymentRef string, meta eventstore.Metadata) (PurchaseResult, error) {
	paymentRef = strings.TrimSpace(paymentRef)
	if paymentRef == "" || len(paymentRef) > 200 {
		return PurchaseResult{}, &domain.ValidationError{Field: "payment_ref", Message: "is required (at most 200 characters)"}
	}
	if err := domain.ValidatePurchase(amountCents); err != nil {
		return PurchaseResult{}, err
	}
	var res PurchaseResult
	now := h.now()
	err := h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		a, err := lockAccount(ctx, tx, accountID)
		if err != nil {
			return err
		}
		// Under the account lock a same-account replay cannot race; a cross-account reuse
		// races only with itself and loses on the primary key.
		var prevAccount string
		err = tx.QueryRow(ctx, `SELECT account_id, credits_added, balance_after FROM purchases WHERE payment_ref = $1`, paymentRef).
			Scan(&prevAccount, &res.CreditsAdded, &res.Balance)
		if err == nil {
			if prevAccount != accountID {
				return domain.ErrPaymentRefReused
			}
			res.Replayed = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		credits := domain.CreditsForCents(amountCents)
		res = PurchaseResult{CreditsAdded: credits, Balance: a.balance + credits}
		if _, err := tx.Exec(ctx, `INSERT INTO purchases (payment_ref, account_id, amount_cents, credits_added, balance_after, recorded_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			paymentRef, accountID, amountCents, credits, res.Balance, now); err != nil {
			return err
		}
		return h.appendToAccount(ctx, tx, a, res.Balance, now, eventstore.NewEvent{Type: domain.EventCreditsPurchased, Metadata: meta,
			Payload: domain.CreditsPurchased{AccountID: accountID, PaymentRef: paymentRef, AmountCents: amountCents, Credits: credits,
				Ledger: domain.Ledger{CreditsDelta: credits, BalanceAfter: res.Balance}}})
	})
	if isUniqueViolation(err) {
		return PurchaseResult{}, domain.ErrPaymentRefReused
	}
	return res, err
}

// BonusResult is the answer to GrantBonus.
type BonusResult struct {
	OutageID string `json:"outage_id"`
	Credits  int64  `json:"credits"`
	Accounts int    `json:"accounts"`
	Replayed bool   `json:"-"`
}

// MaxBonusCredits bounds one grant: a typo should not mint millions of credits.
const MaxBonusCredits = 10_000_000

// GrantBonus adds credits once per outage to every account with an active or grace key.
func (h Accounts) GrantBonus(ctx context.Context, outageID string, credits int64, reason string, meta eventstore.Metadata) (BonusResult, error) {
	outageID = strings.TrimSpace(outageID)
	if outageID == "" || len(outageID) > 200 {
		return BonusResult{}, &domain.ValidationError{Field: "outage_id", Message: "is required (at most 200 characters)"}
	}
	if credits <= 0 || credits > MaxBonusCredits {
		return BonusResult{}, &domain.ValidationError{Field: "credits", Message: fmt.Sprintf("must be between 1 and %d", MaxBonusCredits)}
	}
	if len(reason) > 500 {
		return BonusResult{}, &domain.ValidationError{Field: "reason", Message: "at most 500 characters"}
	}
	res := BonusResult{OutageID: outageID, Credits: credits}
	now := h.now()
	err := h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		// The grant row is claimed first: a concurrent grant of the same outage waits here
		// and then finds it taken.
		tag, err := tx.Exec(ctx, `INSERT INTO bonus_grants (outage_id, credits, reason, accounts, granted_at) VALUES ($1, $2, $3, 0, $4) ON CONFLICT DO NOTHING`,
			outageID, credits, reason, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			res.Replayed = true
			return tx.QueryRow(ctx, `SELECT credits, accounts FROM bonus_grants WHERE outage_id = $1`, outageID).Scan(&res.Credits, &res.Accounts)
		}
		rows, err := tx.Query(ctx, `SELECT DISTINCT account_id FROM api_keys
			WHERE state = 'active' OR (state = 'grace' AND grace_until > $1) ORDER BY account_id`, now)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range ids {
			a, err := lockAccount(ctx, tx, id)
			if err != nil {
				return err
			}
			if err := h.appendToAccount(ctx, tx, a, a.balance+credits, now, eventstore.NewEvent{Type: domain.EventBonusGranted, Metadata: meta,
				Payload: domain.BonusGranted{AccountID: id, OutageID: outageID, Credits: credits, Reason: reason,
					Ledger: domain.Ledger{CreditsDelta: credits, BalanceAfter: a.balance + credits}}}); err != nil {
				return err
			}
		}
		res.Accounts = len(ids)
		_, err = tx.Exec(ctx, `UPDATE bonus_grants SET accounts = $2 WHERE outage_id = $1`, outageID, len(ids))
		return err
	})
	return res, err
}
