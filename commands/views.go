package commands

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// Views answers the operators' reads of an account: the account itself, its ledger and its
// balance at an instant. Each costs the same however long the account's history is: totals
// are kept in the account row, ledger pages and balance-at are index descents into the store.
type Views struct {
	Pool *pgxpool.Pool
}

// AccountView is an account as an operator sees it. Balance, keys and totals come from the
// write model, so they are current the moment an admin call returns.
type AccountView struct {
	AccountID string        `json:"account_id"`
	Name      string        `json:"name"`
	Email     string        `json:"email"`
	Balance   int64         `json:"balance"`
	OpenedAt  time.Time     `json:"opened_at"`
	Keys      []KeyView     `json:"keys"`
	Totals    AccountTotals `json:"totals"`
	// RateLimitPerMinute is the account's own cap per key (SetRateLimit); null when the
	// server's default applies.
	RateLimitPerMinute *int `json:"rate_limit_per_minute"`
}

// KeyView never holds the key itself: only its prefix and last 4 characters.
type KeyView struct {
	KeyID      string          `json:"key_id"`
	Prefix     string          `json:"prefix"`
	Last4      string          `json:"last4"`
	State      domain.KeyState `json:"state"`
	GraceUntil *time.Time      `json:"grace_until"`
	IssuedAt   time.Time       `json:"issued_at"`
}

// AccountTotals are an account's running totals.
type AccountTotals struct {
	PurchasedCredits     int64 `json:"purchased_credits"`
	BonusCredits         int64 `json:"bonus_credits"`
	ChargedCredits       int64 `json:"charged_credits"`
	RequestsCharged      int64 `json:"requests_charged"`
	RequestsDeduplicated int64 `json:"requests_deduplicated"`
}

// Account returns an account with its keys (their states at now) and totals, read in one
// snapshot so that they describe the same moment.
func (v Views) Account(ctx context.Context, accountID string, now time.Time) (AccountView, error) {
	out := AccountView{AccountID: accountID, Keys: []KeyView{}}
	err := pgx.BeginTxFunc(ctx, v.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		t := &out.Totals
		err := tx.QueryRow(ctx, `SELECT name, email, balance, opened_at, purchased_credits, bonus_credits, charged_credits,
				requests_charged, requests_deduplicated, rate_limit_per_minute
			FROM accounts WHERE account_id = $1`, accountID).
			Scan(&out.Name, &out.Email, &out.Balance, &out.OpenedAt, &t.PurchasedCredits, &t.BonusCredits, &t.ChargedCredits,
				&t.RequestsCharged, &t.RequestsDeduplicated, &out.RateLimitPerMinute)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.ErrAccountNotFound
		}
		if err != nil {
			return err
		}
		keys, err := loadKeys(ctx, tx, accountID)
		for _, k := range keys {
			out.Keys = append(out.Keys, KeyView{KeyID: k.ID, Prefix: domain.KeyPrefix, Last4: k.Last4,
				State: k.StateAt(now), GraceUntil: k.GraceUntil, IssuedAt: k.IssuedAt.UTC()})
		}
		return err
	})
	out.OpenedAt = out.OpenedAt.UTC()
	return out, err
}

// LedgerEntry is one account fact as the ledger shows it.
type LedgerEntry struct {
	Position     int64           `json:"position"`
	Version      int64           `json:"version"`
	Type         string          `json:"type"`
	RecordedAt   time.Time       `json:"recorded_at"`
	CreditsDelta int64           `json:"credits_delta"`
	BalanceAfter int64           `json:"balance_after"`
	Payload      json.RawMessage `json:"payload"`
}

// Ledger returns up to limit facts of an account after the given position, in order, read
// from the event store itself.
func (v Views) Ledger(ctx context.Context, accountID string, after int64, limit int) ([]LedgerEntry, error) {
	out := []LedgerEntry{}
	err := pgx.BeginTxFunc(ctx, v.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		keys, err := keyIDsByNo(ctx, tx, accountID)
		if err != nil {
			return err
		}
		events, err := eventstore.ReadStreamPage(ctx, tx, domain.AccountStream(accountID), after, limit)
		if err != nil {
			return err
		}
		for _, e := range events {
			entry, err := ledgerEntry(e, keys)
			if err != nil {
				return err
			}
			out = append(out, entry)
		}
		return nil
	})
	return out, err
}

// keyIDsByNo maps an account's key numbers to key ids; an unknown account is ErrAccountNotFound.
func keyIDsByNo(ctx context.Context, tx pgx.Tx, accountID string) (map[int]string, error) {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE account_id = $1)`, accountID).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		return nil, domain.ErrAccountNotFound
	}
	rows, err := tx.Query(ctx, `SELECT key_no, key_id FROM api_keys WHERE account_id = $1`, accountID)
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	var no int
	var id string
	_, err = pgx.ForEachRow(rows, []any{&no, &id}, func() error { out[no] = id; return nil })
	return out, err
}

// ledgerCharge is a metered event as the ledger shows it: the compact stored form, spelled out.
type ledgerCharge struct {
	KeyID         string           `json:"key_id"`
	Operation     domain.Operation `json:"operation"`
	Paid          []string         `json:"paid"`
	Deduplicated  []string         `json:"deduplicated"`
	OmittedUnpaid int              `json:"omitted_unpaid"`
}

// ledgerEntry shows a stored event: metered events spelled out, others as stored but for a
// key's hash, which is no secret but no business of an auditor either.
func ledgerEntry(e eventstore.Event, keys map[int]string) (LedgerEntry, error) {
	f, err := domain.DecodeAccountFact(e.Type, e.Payload)
	if err != nil {
		return LedgerEntry{}, err
	}
	entry := LedgerEntry{Position: e.Position, Version: e.Version, Type: e.Type, RecordedAt: e.RecordedAt.UTC(),
		CreditsDelta: f.CreditsDelta, BalanceAfter: f.BalanceAfter}
	switch {
	case f.Metered():
		c := ledgerCharge{KeyID: f.KeyID, Operation: f.Operation, Paid: f.Paid, Deduplicated: f.Deduplicated, OmittedUnpaid: f.OmittedUnpaid}
		if c.KeyID == "" {
			c.KeyID = keys[f.KeyNo]
		}
		if c.Paid == nil {
			c.Paid = []string{}
		}
		if c.Deduplicated == nil {
			c.Deduplicated = []string{}
		}
		entry.Payload, err = json.Marshal(c)
	default:
		var fields map[string]json.RawMessage
		if err = json.Unmarshal(e.Payload, &fields); err == nil {
			delete(fields, "key_hash")
			entry.Payload, err = json.Marshal(fields)
		}
	}
	return entry, err
}

// BalanceAt is an account's balance right after its last fact recorded at or before at (0
// before its first): read from the store, so it is exact whatever the projections' lag.
func (v Views) BalanceAt(ctx context.Context, accountID string, at time.Time) (int64, error) {
	var balance int64
	err := pgx.BeginTxFunc(ctx, v.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE account_id = $1)`, accountID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return domain.ErrAccountNotFound
		}
		e, ok, err := eventstore.LastAt(ctx, tx, domain.AccountStream(accountID), at)
		if err != nil || !ok {
			return err
		}
		f, err := domain.DecodeAccountFact(e.Type, e.Payload)
		balance = f.BalanceAfter
		return err
	})
	return balance, err
}
