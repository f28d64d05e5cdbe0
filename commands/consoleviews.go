package commands

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
)

// The reads below serve the operators' console (console/): a search over accounts, the daily
// figures its charts draw, and how many accounts a bonus grant would reach.

// AccountSummary is one account in a search result.
type AccountSummary struct {
	AccountID string
	Name      string
	Email     string
	Balance   int64
	Keys      []KeyView
	// Spent7Days is the credits charged on the last seven UTC days, today included, from the
	// account_days read model.
	Spent7Days int64
}

// SearchAccounts finds up to limit accounts whose name or e-mail contains q (any case), the
// newest first; an empty q lists the newest accounts.
func (v Views) SearchAccounts(ctx context.Context, q string, now time.Time, limit int) ([]AccountSummary, error) {
	out := []AccountSummary{}
	pattern := "%" + likeEscaper.Replace(strings.TrimSpace(q)) + "%"
	err := pgx.BeginTxFunc(ctx, v.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		byID := map[string]int{}
		ids := []string{}
		rows, err := tx.Query(ctx, `SELECT a.account_id, a.name, a.email, a.balance,
				coalesce((SELECT sum(d.credits) FROM rm_account_days d WHERE d.account_id = a.account_id
					AND d.day > $2::date - 7 AND d.kind NOT IN ('', 'purchase', 'bonus')), 0)::bigint
			FROM accounts a
			WHERE a.name ILIKE $1 OR a.email ILIKE $1
			ORDER BY a.opened_at DESC, a.account_id LIMIT $3`, pattern, now.UTC(), limit)
		if err != nil {
			return err
		}
		var s AccountSummary
		_, err = pgx.ForEachRow(rows, []any{&s.AccountID, &s.Name, &s.Email, &s.Balance, &s.Spent7Days}, func() error {
			s.Keys = []KeyView{}
			byID[s.AccountID] = len(out)
			ids = append(ids, s.AccountID)
			out = append(out, s)
			return nil
		})
		if err != nil || len(ids) == 0 {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT account_id, key_id, key_no, last4, state, issued_at, `+graceUntilShown+`
			FROM api_keys WHERE account_id = ANY($1) ORDER BY issued_at, key_id`, ids)
		if err != nil {
			return err
		}
		var k domain.Key
		_, err = pgx.ForEachRow(rows, []any{&k.AccountID, &k.ID, &k.No, &k.Last4, &k.State, &k.IssuedAt, &k.GraceUntil}, func() error {
			i := byID[k.AccountID]
			out[i].Keys = append(out[i].Keys, KeyView{KeyID: k.ID, Prefix: domain.KeyPrefix, Last4: k.Last4,
				State: k.StateAt(now), GraceUntil: k.GraceUntil, IssuedAt: k.IssuedAt})
			return nil
		})
		return err
	})
	return out, err
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// DaySpend is the credits an account spent on one UTC day on one operation.
type DaySpend struct {
	Day       time.Time
	Operation string
	Credits   int64
}

// DayBalance is an account's balance at the end of a UTC day on which it changed.
type DayBalance struct {
	Day     time.Time
	Balance int64
}

// AccountDays returns, for the UTC days from..to (inclusive), the credits spent per day and
// operation, the closing balance of each day that had facts, and the balance before from.
// They come from the account_days read model, so they trail the store by the projection's lag.
func (v Views) AccountDays(ctx context.Context, accountID string, from, to time.Time) (spend []DaySpend, balances []DayBalance, opening int64, err error) {
	spend, balances = []DaySpend{}, []DayBalance{}
	err = pgx.BeginTxFunc(ctx, v.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT day, kind, credits, balance_after FROM rm_account_days
			WHERE account_id = $1 AND day BETWEEN $2::date AND $3::date AND kind NOT IN ('purchase', 'bonus')
			ORDER BY day, kind`, accountID, from.UTC(), to.UTC())
		if err != nil {
			return err
		}
		var (
			day            time.Time
			kind           string
			credits, after int64
		)
		_, err = pgx.ForEachRow(rows, []any{&day, &kind, &credits, &after}, func() error {
			if kind == "" {
				balances = append(balances, DayBalance{Day: day.UTC(), Balance: after})
			} else {
				spend = append(spend, DaySpend{Day: day.UTC(), Operation: kind, Credits: credits})
			}
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT balance_after FROM rm_account_days WHERE account_id = $1 AND kind = '' AND day < $2::date
			ORDER BY day DESC LIMIT 1`, accountID, from.UTC()).Scan(&opening)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return spend, balances, opening, err
}

// BonusReach is how many accounts a bonus grant asked for at the given instant would credit:
// those with a key usable then (the rule GrantBonus applies, in grantChunk).
func (h Accounts) BonusReach(ctx context.Context, at time.Time) (int, error) {
	var n int
	err := h.Store.Pool.QueryRow(ctx, `SELECT count(DISTINCT account_id) FROM api_keys
		WHERE issued_at <= $1 AND (revoked_at IS NULL OR revoked_at > $1) AND (grace_until IS NULL OR grace_until > $1)`, at).Scan(&n)
	return n, err
}

// RecentGrants lists the newest bonus grants, at most limit.
func (h Accounts) RecentGrants(ctx context.Context, limit int) ([]BonusGrant, error) {
	rows, err := h.Store.Pool.Query(ctx, `SELECT outage_id, credits, reason, state, accounts, granted_at, finished_at
		FROM bonus_grants ORDER BY granted_at DESC, outage_id LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	out := []BonusGrant{}
	var g BonusGrant
	_, err = pgx.ForEachRow(rows, []any{&g.OutageID, &g.Credits, &g.Reason, &g.State, &g.Accounts, &g.GrantedAt, &g.FinishedAt}, func() error {
		out = append(out, g)
		return nil
	})
	return out, err
}

// Payment is a recorded purchase, found by its payment reference.
type Payment struct {
	AccountID    string
	AmountCents  int64
	CreditsAdded int64
	RecordedAt   time.Time
}

// Payment finds the purchase recorded under a payment reference; ok is false when there is
// none. The console asks before it offers to record a purchase, so that a reference already
// used is refused up front rather than answered as a replay that adds nothing.
func (v Views) Payment(ctx context.Context, paymentRef string) (p Payment, ok bool, err error) {
	err = v.Pool.QueryRow(ctx, `SELECT account_id, amount_cents, credits_added, recorded_at FROM purchases WHERE payment_ref = $1`,
		paymentRef).Scan(&p.AccountID, &p.AmountCents, &p.CreditsAdded, &p.RecordedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, false, nil
	}
	p.RecordedAt = p.RecordedAt.UTC()
	return p, err == nil, err
}
