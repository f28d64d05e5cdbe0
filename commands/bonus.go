package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// MaxBonusCredits bounds one grant: a typo should not mint millions of credits.
const MaxBonusCredits = 10_000_000

// bonusChunk is how many accounts one transaction of a grant credits. A chunk locks its
// accounts for about as long as a batch of charges does, so a grant to every account never
// holds a paying client's request for longer than a charge would.
const bonusChunk = 200

// BonusGrant is a grant and how far it has got.
type BonusGrant struct {
	OutageID   string     `json:"outage_id"`
	Credits    int64      `json:"credits"`
	Reason     string     `json:"reason"`
	State      string     `json:"state"`    // running or done
	Accounts   int        `json:"accounts"` // accounts credited so far
	GrantedAt  time.Time  `json:"granted_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// BonusResult is the answer to GrantBonus.
type BonusResult struct {
	OutageID string `json:"outage_id"`
	Credits  int64  `json:"credits"`
	Accounts int    `json:"accounts"`
	Replayed bool   `json:"-"`
	// First is true for the call that recorded the grant: a later call with the same outage id,
	// while the grant runs or after, adds nothing of its own (its credits and reason are not
	// used), though it may help finish the running grant.
	First bool `json:"-"`
}

// GrantBonus adds credits once per outage to every account that had an active or grace key
// when the grant was first asked for. It runs in chunks of accounts in account-id order, each
// chunk its own transaction that also moves the grant's progress, so it holds no account lock
// for long, and a grant cut short (a crash, a timeout) is finished by asking for it again —
// by any process — without crediting any account twice. Asking again for a finished grant
// changes nothing and answers with its figures (Replayed).
func (h Accounts) GrantBonus(ctx context.Context, outageID string, credits int64, reason string, meta eventstore.Metadata) (BonusResult, error) {
	if err := ValidateReference("outage_id", outageID); err != nil {
		return BonusResult{}, err
	}
	if credits <= 0 || credits > MaxBonusCredits {
		return BonusResult{}, &domain.ValidationError{Field: "credits", Message: fmt.Sprintf("must be between 1 and %d", MaxBonusCredits)}
	}
	if err := ValidateReason(reason); err != nil {
		return BonusResult{}, err
	}
	// The grant's instant is taken holding keyGrantLock alone: every key change recorded
	// before it has committed (the chunks see it), and every later one is recorded after it
	// (lockForKeyChange). It is never before a key change that has committed, whatever the clock
	// of the process that recorded it: a key issued on a process whose clock runs ahead is
	// eligible, and one revoked there is not.
	var first bool
	var err error
	for {
		err = h.Store.WithTx(ctx, func(tx pgx.Tx) error {
			if err := lockKeyChangesOut(ctx, tx); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `INSERT INTO bonus_grants (outage_id, credits, reason, accounts, granted_at, state)
				SELECT $1, $2, $3, 0, greatest($4::timestamptz, max(issued_at), max(revoked_at)), 'running' FROM api_keys
				ON CONFLICT DO NOTHING`, outageID, credits, reason, h.now())
			first = tag.RowsAffected() == 1
			return err
		})
		if !errors.Is(err, errKeyChangesBusy) {
			break
		}
		// Let the key changes yielding to this attempt through (they retry every 10 ms at
		// most), then queue again: a fresh window in which later ones yield.
		select {
		case <-ctx.Done():
			return BonusResult{}, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	if err != nil {
		return BonusResult{}, err
	}
	g, err := h.Grant(ctx, outageID)
	if err != nil {
		return BonusResult{}, err
	}
	if g.State == "done" && !first {
		return BonusResult{OutageID: outageID, Credits: g.Credits, Accounts: g.Accounts, Replayed: true}, nil
	}
	if g, err = h.RunGrant(ctx, outageID, meta); err != nil {
		return BonusResult{}, err
	}
	return BonusResult{OutageID: outageID, Credits: g.Credits, Accounts: g.Accounts, First: first}, nil
}

// lockKeyChangesOut takes keyGrantLock alone in tx, once every key change holding it has
// committed. It asks again until it gets it rather than waiting in PostgreSQL's queue: there
// every key change asked for after it would wait behind it, for every account, as long as one
// key change it waits for waits on its own account's row (held by a transaction that hangs),
// and a compromised key could not be revoked meanwhile. It first queues for grantPendingLock,
// behind the key changes in progress that hold it shared: key changes asked for from then on
// cannot have it and yield for a moment (yieldToPendingGrant), so those in progress, once
// committed, leave keyGrantLock free for it. It holds grantPendingLock at most keyChangeYield
// without finding keyGrantLock free, then returns errKeyChangesBusy, and GrantBonus lets go
// and queues again: key changes that stopped yielding meanwhile (those in progress took
// longer, one stuck on its account's row) would otherwise hold keyGrantLock in turn as long as
// they keep coming, each at its arrival plus keyChangeYield; in a fresh window later ones yield.
func lockKeyChangesOut(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, grantPendingLock); err != nil {
		return err
	}
	got, err := pollLock(ctx, tx, `SELECT pg_try_advisory_xact_lock($1)`, keyGrantLock, time.Now().Add(keyChangeYield), 50*time.Millisecond)
	if err == nil && !got {
		err = errKeyChangesBusy
	}
	return err
}

// errKeyChangesBusy: keyGrantLock was not free within keyChangeYield of holding grantPendingLock.
var errKeyChangesBusy = errors.New("key changes kept the key/grant lock")

// Grant returns a grant and its progress.
func (h Accounts) Grant(ctx context.Context, outageID string) (BonusGrant, error) {
	g := BonusGrant{OutageID: outageID}
	err := h.Store.Pool.QueryRow(ctx, `SELECT credits, reason, state, accounts, granted_at, finished_at FROM bonus_grants WHERE outage_id = $1`,
		outageID).Scan(&g.Credits, &g.Reason, &g.State, &g.Accounts, &g.GrantedAt, &g.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return g, domain.ErrGrantNotFound
	}
	g.GrantedAt = g.GrantedAt.UTC()
	if g.FinishedAt != nil {
		t := g.FinishedAt.UTC()
		g.FinishedAt = &t
	}
	return g, err
}

// RunGrant credits the remaining accounts of a running grant, chunk by chunk, until it is done.
// Several callers may run one grant at once: chunks serialize on the grant's row.
func (h Accounts) RunGrant(ctx context.Context, outageID string, meta eventstore.Metadata) (BonusGrant, error) {
	wait := false
	for {
		var done, held bool
		err := h.Store.WithTx(ctx, func(tx pgx.Tx) (err error) {
			done, held, err = h.grantChunk(ctx, tx, outageID, meta, wait)
			return err
		})
		if err != nil {
			return BonusGrant{}, err
		}
		// The chunk's first account is held by another transaction: it is waited for alone, in
		// a chunk of its own that holds no other account meanwhile.
		if wait = held; held {
			continue
		}
		g, err := h.Grant(ctx, outageID)
		if err != nil {
			return g, err
		}
		if h.GrantProgress != nil {
			h.GrantProgress(g)
		}
		if done {
			return g, nil
		}
	}
}

// ResumeGrants finishes every grant left running (by a process that stopped mid-way). A grant
// that fails does not keep the others waiting: each is tried, and the errors are returned
// together.
func (h Accounts) ResumeGrants(ctx context.Context, meta eventstore.Metadata) error {
	rows, err := h.Store.Pool.Query(ctx, `SELECT outage_id FROM bonus_grants WHERE state = 'running' ORDER BY granted_at`)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if _, err := h.RunGrant(ctx, id, meta); err != nil {
			if ctx.Err() != nil {
				return err
			}
			errs = append(errs, fmt.Errorf("bonus grant %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// grantChunk credits the next chunk of eligible accounts after the grant's progress mark and
// moves the mark, in tx. done is true when there was nothing left to credit.
//
// A chunk never waits for an account's row while holding others: it locks the rows it can
// (SKIP LOCKED) and credits the accounts before the first one another transaction holds. When
// that is the chunk's first account, nothing is written and held is true: the caller asks
// again with wait, for a chunk of that one account, which waits for its row holding no other.
// A row held for long (a hung admin command, an operator's open transaction) so delays the
// grant, never the charges of the accounts around it.
func (h Accounts) grantChunk(ctx context.Context, tx pgx.Tx, outageID string, meta eventstore.Metadata, wait bool) (done, held bool, err error) {
	var (
		g     BonusGrant
		after string
	)
	err = tx.QueryRow(ctx, `SELECT credits, reason, state, granted_at, after_account FROM bonus_grants WHERE outage_id = $1 FOR UPDATE`, outageID).
		Scan(&g.Credits, &g.Reason, &g.State, &g.GrantedAt, &after)
	if err != nil {
		return false, false, err
	}
	if g.State == "done" {
		return true, false, nil
	}
	chunk, lock := bonusChunk, "FOR UPDATE SKIP LOCKED"
	if wait {
		chunk, lock = 1, "FOR UPDATE"
	}
	// Eligible: a key that was usable when the grant was asked for — issued by then, and
	// neither revoked nor past its grace at that instant — whatever happened to it since.
	rows, err := tx.Query(ctx, `SELECT DISTINCT account_id FROM api_keys
		WHERE account_id > $1 AND issued_at <= $2 AND (revoked_at IS NULL OR revoked_at > $2) AND (grace_until IS NULL OR grace_until > $2)
		ORDER BY account_id LIMIT $3`, after, g.GrantedAt, chunk)
	if err != nil {
		return false, false, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, false, err
	}
	if len(ids) == 0 {
		_, err = tx.Exec(ctx, `UPDATE bonus_grants SET state = 'done', finished_at = $2 WHERE outage_id = $1`, outageID, grantNow(h.now(), g))
		return true, false, err
	}
	// Lock the chunk's accounts in account-id order (as charge batches do), then read their
	// heads.
	rows, err = tx.Query(ctx, `SELECT account_id, stream_no, balance FROM accounts WHERE account_id = ANY($1) ORDER BY account_id `+lock, ids)
	if err != nil {
		return false, false, err
	}
	type locked struct {
		id      string
		no      int32
		balance int64
	}
	var accounts []locked
	var l locked
	if _, err := pgx.ForEachRow(rows, []any{&l.id, &l.no, &l.balance}, func() error { accounts = append(accounts, l); return nil }); err != nil {
		return false, false, err
	}
	if !wait {
		// Only the accounts before the first one held elsewhere: the progress mark is one account.
		n := 0
		for n < len(accounts) && accounts[n].id == ids[n] {
			n++
		}
		if n == 0 {
			return false, true, nil
		}
		accounts, ids = accounts[:n], ids[:n]
	}
	nos := make([]int32, len(accounts))
	for i, a := range accounts {
		nos[i] = a.no
	}
	heads, err := eventstore.HeadsByNo(ctx, tx, nos...)
	if err != nil {
		return false, false, err
	}
	// Recorded once the chunk holds its accounts: a wait for a row does not date the bonus back.
	now := grantNow(h.now(), g)
	var b eventstore.Batch
	for _, a := range accounts {
		if _, err := b.Add(heads[a.no], now, eventstore.NewEvent{Type: domain.EventBonusGranted, Metadata: meta,
			Payload: domain.BonusGranted{AccountID: a.id, OutageID: outageID, Credits: g.Credits, Reason: g.Reason,
				Ledger: domain.Ledger{CreditsDelta: g.Credits, BalanceAfter: a.balance + g.Credits}}}); err != nil {
			return false, false, err
		}
	}
	if err := eventstore.Write(ctx, tx, &b); err != nil {
		return false, false, err
	}
	if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2, bonus_credits = bonus_credits + $2 WHERE account_id = ANY($1)`,
		ids, g.Credits); err != nil {
		return false, false, err
	}
	_, err = tx.Exec(ctx, `UPDATE bonus_grants SET after_account = $2, accounts = accounts + $3 WHERE outage_id = $1`,
		outageID, ids[len(ids)-1], len(accounts))
	return false, false, err
}

// grantNow is the time a chunk of grant g records at: now, or the grant's instant when that is
// later (a process whose clock runs ahead asked for the grant), so that no bonus is in the
// ledger before the grant was asked for.
func grantNow(now time.Time, g BonusGrant) time.Time {
	if now.Before(g.GrantedAt) {
		return g.GrantedAt.UTC()
	}
	return now
}
