package commands

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// Charger meters read requests. It decides from the write model under the account's row
// lock, so the decision is exact across any number of processes sharing the database.
type Charger struct {
	Store *eventstore.Store
	Clock func() time.Time
	// Group, when set, makes Charge share transactions with concurrent charges (group
	// commit). Nil runs one transaction per charge.
	Group *GroupCommitter
}

// Caller is the account and key behind a valid API key.
type Caller struct {
	AccountID string
	KeyID     string
}

// Authenticate resolves a key hash to its caller. An unknown key is ErrInvalidKey; a revoked
// key, or a rotated one past its grace, is ErrKeyRevoked. It reads the write model, so a key
// issued or revoked by any process is seen as soon as that call returned.
func (c Charger) Authenticate(ctx context.Context, hash domain.KeyHash) (Caller, error) {
	var k domain.Key
	err := c.Store.Pool.QueryRow(ctx, `SELECT key_id, account_id, state, grace_until FROM api_keys WHERE key_hash = $1`, hash[:]).
		Scan(&k.ID, &k.AccountID, &k.State, &k.GraceUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return Caller{}, domain.ErrInvalidKey
	}
	if err != nil {
		return Caller{}, err
	}
	if err := k.Authorize(c.Clock()); err != nil {
		return Caller{}, err
	}
	return Caller{AccountID: k.AccountID, KeyID: k.ID}, nil
}

// ChargeRequest is one metered request: the operation and the resources it serves (one for
// a fixed-cost operation; the result rows, in order, for a per-row one).
type ChargeRequest struct {
	KeyHash   domain.KeyHash
	RequestID string
	Operation domain.Operation
	Resources []string
}

// ChargeResult is the metering outcome the read API reports in meta.
type ChargeResult struct {
	domain.ChargeDecision
	Balance int64
}

// Charge meters a request in one transaction: lock the account, re-check the key, read
// today's claims, decide, claim what is paid, append one event, move the head. Nothing is
// claimed or spent unless all of it commits.
//
// With Group set, the request joins the group committer's next batch and shares its
// transaction (see GroupCommitter); the answer and the errors are the same.
func (c Charger) Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error) {
	if c.Group != nil {
		return c.Group.Charge(ctx, req)
	}
	now := c.Clock().UTC()
	var res ChargeResult
	err := c.Store.WithTx(ctx, func(tx pgx.Tx) error {
		var err error
		res, err = chargeInTx(ctx, c.Store, tx, req, now)
		return err
	})
	if err != nil {
		return ChargeResult{}, err
	}
	return res, nil
}

// chargeInTx runs the steps of one charge inside tx. The single-transaction path and the
// group committer both run these steps, so they decide alike; it leaves tx open either way.
func chargeInTx(ctx context.Context, store *eventstore.Store, tx pgx.Tx, req ChargeRequest, now time.Time) (ChargeResult, error) {
	h, err := scanChargeHead(tx.QueryRow(ctx, lockChargeHead, req.KeyHash[:]))
	if err != nil {
		return ChargeResult{}, err
	}
	return chargeLocked(ctx, store, tx, req, now, h, func() (map[string]bool, error) {
		return claimsToday(ctx, tx, h.account.id, domain.Day(now), req.Resources)
	})
}

// lockChargeHead locks the account behind a key hash and reads the key with it.
const lockChargeHead = `SELECT k.key_id, k.state, k.grace_until, a.account_id, a.balance, a.version
	FROM api_keys k JOIN accounts a ON a.account_id = k.account_id
	WHERE k.key_hash = $1 FOR UPDATE OF a`

// chargeHead is a key and its account's head, locked.
type chargeHead struct {
	key     domain.Key
	account account
}

func scanChargeHead(row pgx.Row) (chargeHead, error) {
	var h chargeHead
	err := row.Scan(&h.key.ID, &h.key.State, &h.key.GraceUntil, &h.account.id, &h.account.balance, &h.account.version)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, domain.ErrInvalidKey
	}
	return h, err
}

// chargeLocked is the rest of a charge once its account is locked: re-check the key, read
// today's claims, decide, claim what is paid, append one event, move the head.
func chargeLocked(ctx context.Context, store *eventstore.Store, tx pgx.Tx, req ChargeRequest, now time.Time, h chargeHead,
	claimsToday func() (map[string]bool, error)) (ChargeResult, error) {
	day := domain.Day(now)
	k, a := h.key, h.account
	var res ChargeResult
	// Checked again under the lock: a revoke that committed after Authenticate wins.
	if err := k.Authorize(now); err != nil {
		return res, err
	}
	res.Balance = a.balance
	if len(req.Resources) == 0 {
		res.Served = []bool{}
		return res, nil
	}
	claimed, err := claimsToday()
	if err != nil {
		return res, err
	}
	d, err := domain.DecideCharge(req.Operation, req.Resources, a.balance, func(r string) bool { return claimed[r] })
	if err != nil {
		return res, err
	}
	res.ChargeDecision = d
	res.Balance = a.balance - d.Credits
	var event eventstore.NewEvent
	meta := eventstore.Metadata{RequestID: req.RequestID, Actor: "key:" + k.ID}
	ledger := domain.Ledger{CreditsDelta: -d.Credits, BalanceAfter: res.Balance}
	if len(d.Paid) == 0 {
		event = eventstore.NewEvent{Type: domain.EventRequestDeduplicated, Metadata: meta, Payload: domain.RequestDeduplicated{
			AccountID: a.id, KeyID: k.ID, RequestID: req.RequestID, Operation: req.Operation, Day: day,
			Deduplicated: d.Deduplicated, Ledger: ledger}}
	} else {
		event = eventstore.NewEvent{Type: domain.EventRequestCharged, Metadata: meta, Payload: domain.RequestCharged{
			AccountID: a.id, KeyID: k.ID, RequestID: req.RequestID, Operation: req.Operation, Day: day,
			Paid: d.Paid, Deduplicated: d.Deduplicated, OmittedUnpaid: d.OmittedUnpaid, Ledger: ledger}}
		if _, err := tx.Exec(ctx, `INSERT INTO dedup_claims (account_id, day, resource) SELECT $1, $2, unnest($3::text[])`,
			a.id, day, d.Paid); err != nil {
			return res, err
		}
	}
	v, err := store.Append(ctx, tx, domain.AccountStream(a.id), a.version, now, event)
	if err != nil {
		return res, err
	}
	_, err = tx.Exec(ctx, `UPDATE accounts SET version = $2, balance = $3 WHERE account_id = $1`, a.id, v, res.Balance)
	return res, err
}

// claimsTodaySQL reads which of the resources ($3) the account ($1) paid on the day ($2).
const claimsTodaySQL = `SELECT resource FROM dedup_claims WHERE account_id = $1 AND day = $2 AND resource = ANY($3)`

func claimsToday(ctx context.Context, tx pgx.Tx, accountID, day string, resources []string) (map[string]bool, error) {
	return collectClaims(tx.Query(ctx, claimsTodaySQL, accountID, day, resources))
}

func collectClaims(rows pgx.Rows, err error) (map[string]bool, error) {
	if err != nil {
		return nil, err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(got))
	for _, r := range got {
		m[r] = true
	}
	return m, nil
}
