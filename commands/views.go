package commands

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/archive"
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

// AccountTotals are an account's running totals (kept in its row by the commands).
type AccountTotals = domain.AccountTotals

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
				State: k.StateAt(now), GraceUntil: k.GraceUntil, IssuedAt: k.IssuedAt})
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
// from the event store itself (LedgerPage's entries).
func (v Views) Ledger(ctx context.Context, accountID string, after int64, limit int) ([]LedgerEntry, error) {
	page, err := v.LedgerPage(ctx, accountID, after, limit)
	return page.Entries, err
}

// LedgerPage is a page of an account's ledger.
type LedgerPage struct {
	Entries []LedgerEntry
	// Archived is set when the page was asked to start inside the account's archived history:
	// it then starts right after it, and this says what was skipped.
	Archived *ArchivedLedger
}

// ArchivedLedger is the part of an account's ledger that is archived: its first Facts facts,
// up to position Position, recorded up to RecordedAt, and the balance after them — the balance
// brought forward to the first entry shown.
type ArchivedLedger struct {
	Facts        int64     `json:"facts"`
	Position     int64     `json:"through_position"`
	RecordedAt   time.Time `json:"through_recorded_at"`
	BalanceAfter int64     `json:"balance_after"`
}

// LedgerPage returns up to limit facts of an account after the given position, in order, read
// from the event store itself. A page asked to start inside archived history starts right after
// it and says so (docs/api.md).
func (v Views) LedgerPage(ctx context.Context, accountID string, after int64, limit int) (LedgerPage, error) {
	out := LedgerPage{Entries: []LedgerEntry{}}
	err := eventstore.ReadSnapshot(ctx, v.Pool, func(tx pgx.Tx) error {
		keys, err := keyIDsByNo(ctx, tx, accountID)
		if err != nil {
			return err
		}
		stream := domain.AccountStream(accountID)
		b, archived, err := eventstore.BoundaryOf(ctx, tx, stream)
		if err != nil {
			return err
		}
		if archived && after < b.Position {
			state, err := archive.DecodeAccountState(b.Account)
			if err != nil {
				return err
			}
			out.Archived = &ArchivedLedger{Facts: b.Version, Position: b.Position, RecordedAt: b.At, BalanceAfter: state.Balance}
			after = b.Position
		}
		events, err := eventstore.ReadStreamPage(ctx, tx, stream, after, limit)
		if err != nil {
			return err
		}
		for _, e := range events {
			entry, err := ledgerEntry(e, keys)
			if err != nil {
				return err
			}
			out.Entries = append(out.Entries, entry)
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
// before its first): read from the store, so it is exact whatever the projections' lag. When
// the account's older facts are archived it is still exact from the last archived fact on
// (from the state archived with it) and before the first; in between it is a
// *domain.ArchivedError.
func (v Views) BalanceAt(ctx context.Context, accountID string, at time.Time) (int64, error) {
	var balance int64
	err := eventstore.ReadSnapshot(ctx, v.Pool, func(tx pgx.Tx) error {
		if err := accountExists(ctx, tx, accountID); err != nil {
			return err
		}
		var err error
		balance, err = balanceAt(ctx, tx, domain.AccountStream(accountID), at)
		return err
	})
	return balance, err
}

// Statement sums an account's facts over a window of UTC days (docs/api.md, "Statements").
type Statement struct {
	AccountID string `json:"account_id"`
	From      string `json:"from"` // first day, inclusive
	To        string `json:"to"`   // last day, exclusive
	// OpeningBalance is the balance after the last fact before From (balance-at of the last
	// instant before it); ClosingBalance the same before To. Closing is opening plus the
	// credits_delta of every ledger entry in the window.
	OpeningBalance int64              `json:"opening_balance"`
	Purchases      StatementPurchases `json:"purchases"`
	Bonuses        StatementBonuses   `json:"bonuses"`
	Charges        []StatementCharges `json:"charges"` // one per operation charged, by operation
	ClosingBalance int64              `json:"closing_balance"`
}

// StatementPurchases are the credit purchases of a statement's window.
type StatementPurchases struct {
	Count   int64 `json:"count"`
	Credits int64 `json:"credits"`
	Cents   int64 `json:"cents"`
}

// StatementBonuses are the bonus grants of a statement's window.
type StatementBonuses struct {
	Count   int64 `json:"count"`
	Credits int64 `json:"credits"`
}

// StatementCharges are the metered requests of one operation in a statement's window: every
// request (charged or wholly deduplicated), the rows paid for and deduplicated, and the
// credits charged.
type StatementCharges struct {
	Operation        domain.Operation `json:"operation"`
	Requests         int64            `json:"requests"`
	PaidRows         int64            `json:"paid_rows"`
	DeduplicatedRows int64            `json:"deduplicated_rows"`
	Credits          int64            `json:"credits"`
}

// Statement sums an account's facts recorded in [from, to) in one snapshot. It reads only the
// window's events (and balance-at's two lookups), however long the account's history.
func (v Views) Statement(ctx context.Context, accountID string, from, to time.Time) (Statement, error) {
	st := Statement{AccountID: accountID, From: from.UTC().Format(time.DateOnly), To: to.UTC().Format(time.DateOnly), Charges: []StatementCharges{}}
	err := eventstore.ReadSnapshot(ctx, v.Pool, func(tx pgx.Tx) error {
		if err := accountExists(ctx, tx, accountID); err != nil {
			return err
		}
		stream := domain.AccountStream(accountID)
		// The sums read the store: a window holding archived facts (recorded from the first
		// fact's time up to the last archived one's) cannot be summed exactly, whatever its
		// balances say.
		b, archived, err := eventstore.BoundaryOf(ctx, tx, stream)
		if err != nil {
			return err
		}
		if archived && !from.After(b.At) && to.After(b.FirstAt) {
			return &domain.ArchivedError{At: from, Until: to, Facts: b.Version, Through: b.At, FirstAt: b.FirstAt}
		}
		if st.OpeningBalance, err = balanceAt(ctx, tx, stream, from.Add(-time.Microsecond)); err != nil {
			return err
		}
		if st.ClosingBalance, err = balanceAt(ctx, tx, stream, to.Add(-time.Microsecond)); err != nil {
			return err
		}
		byOp := map[domain.Operation]*StatementCharges{}
		defer func() {
			for _, c := range byOp {
				st.Charges = append(st.Charges, *c)
			}
		}()
		return eventstore.ReadStreamWindow(ctx, tx, stream, from, to, func(e eventstore.Event) error {
			f, err := domain.DecodeAccountFact(e.Type, e.Payload)
			if err != nil {
				return err
			}
			switch {
			case f.Type == domain.EventCreditsPurchased:
				st.Purchases.Count++
				st.Purchases.Credits += f.CreditsDelta
				st.Purchases.Cents += f.AmountCents
			case f.Type == domain.EventBonusGranted:
				st.Bonuses.Count++
				st.Bonuses.Credits += f.CreditsDelta
			case f.Metered():
				c := byOp[f.Operation]
				if c == nil {
					c = &StatementCharges{Operation: f.Operation}
					byOp[f.Operation] = c
				}
				c.Requests++
				c.PaidRows += int64(len(f.Paid))
				c.DeduplicatedRows += int64(len(f.Deduplicated))
				c.Credits -= f.CreditsDelta
			}
			return nil
		})
	})
	slices.SortFunc(st.Charges, func(a, b StatementCharges) int { return strings.Compare(string(a.Operation), string(b.Operation)) })
	return st, err
}

// LedgerHead is the position of an account's newest fact (0 when it has none): where an
// export of its whole ledger ends.
func (v Views) LedgerHead(ctx context.Context, accountID string) (int64, error) {
	var head int64
	err := pgx.BeginTxFunc(ctx, v.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := accountExists(ctx, tx, accountID); err != nil {
			return err
		}
		var err error
		head, err = eventstore.StreamHeadPosition(ctx, tx, domain.AccountStream(accountID))
		return err
	})
	return head, err
}

func accountExists(ctx context.Context, tx pgx.Tx, accountID string) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE account_id = $1)`, accountID).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return domain.ErrAccountNotFound
	}
	return nil
}

// balanceAt is the balance after the stream's last fact recorded at or before at (0 before
// its first).
func balanceAt(ctx context.Context, tx pgx.Tx, stream string, at time.Time) (int64, error) {
	e, ok, err := eventstore.LastAt(ctx, tx, stream, at)
	if err != nil {
		return 0, err
	}
	if ok {
		f, err := domain.DecodeAccountFact(e.Type, e.Payload)
		return f.BalanceAfter, err
	}
	// No fact in the store at or before at: either there is none, or it is archived.
	b, archived, err := eventstore.BoundaryOf(ctx, tx, stream)
	switch {
	case err != nil || !archived || at.Before(b.FirstAt):
		return 0, err
	case at.Before(b.At):
		return 0, &domain.ArchivedError{At: at, Facts: b.Version, Through: b.At, FirstAt: b.FirstAt}
	}
	state, err := archive.DecodeAccountState(b.Account)
	return state.Balance, err
}
