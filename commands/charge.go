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
// The transaction takes two round trips: BEGIN, the lock and the claims read go out as one
// pipelined batch; after the decision, the writes and COMMIT go out as another.
//
// With Group set, the request joins the group committer's next batch and shares its
// transaction (see GroupCommitter); the answer and the errors are the same.
func (c Charger) Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error) {
	if c.Group != nil {
		return c.Group.Charge(ctx, req)
	}
	now := c.Clock().UTC()
	conn, err := c.Store.Pool.Acquire(ctx)
	if err != nil {
		return ChargeResult{}, err
	}
	defer conn.Release()
	res, err := chargePipelined(ctx, conn.Conn(), req, now)
	if err != nil {
		// Leave no transaction open on a pooled connection; a broken one is discarded.
		if conn.Conn().PgConn().TxStatus() != 'I' {
			if _, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
				_ = conn.Conn().Close(context.WithoutCancel(ctx))
			}
		}
		return ChargeResult{}, err
	}
	c.Store.Appended()
	return res, nil
}

// claimsByKeySQL reads which of the resources ($3) the account behind a key hash ($1) paid
// on the day ($2); by key hash, so it can be pipelined with the lock before the account id
// is known.
const claimsByKeySQL = `SELECT d.resource FROM dedup_claims d JOIN api_keys k ON k.account_id = d.account_id
	WHERE k.key_hash = $1 AND d.day = $2 AND d.resource = ANY($3)`

func chargePipelined(ctx context.Context, conn *pgx.Conn, req ChargeRequest, now time.Time) (ChargeResult, error) {
	day := domain.Day(now)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(lockChargeHead, req.KeyHash[:])
	// Runs after the lock, in the same transaction, so the claims are current.
	b.Queue(claimsByKeySQL, req.KeyHash[:], day, req.Resources)
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return ChargeResult{}, err
	}
	h, err := scanChargeHead(br.QueryRow())
	if err != nil {
		br.Close()
		return ChargeResult{}, err
	}
	claimed, err := collectClaims(br.Query())
	if err != nil {
		br.Close()
		return ChargeResult{}, err
	}
	if err := br.Close(); err != nil {
		return ChargeResult{}, err
	}
	plan, err := planCharge(req, now, h, claimed)
	if err != nil {
		return ChargeResult{}, err
	}
	w := &pgx.Batch{}
	var appendOp *eventstore.AppendOp
	if plan.event != nil {
		if len(plan.claims) > 0 {
			w.Queue(insertClaimsSQL, h.account.id, day, plan.claims)
		}
		if appendOp, err = eventstore.NewAppendOp(domain.AccountStream(h.account.id), h.account.version, now, *plan.event); err != nil {
			return ChargeResult{}, err
		}
		w.Queue(appendOp.SQL, appendOp.Args...)
		w.Queue(updateHeadSQL, h.account.id, appendOp.NewVersion(), plan.result.Balance)
	}
	w.Queue("COMMIT")
	wr := conn.SendBatch(ctx, w)
	defer wr.Close()
	if plan.event != nil {
		if len(plan.claims) > 0 {
			if _, err := wr.Exec(); err != nil {
				return ChargeResult{}, err
			}
		}
		tag, err := wr.Exec()
		if err := appendOp.Check(tag, err); err != nil {
			return ChargeResult{}, err
		}
		if _, err := wr.Exec(); err != nil {
			return ChargeResult{}, err
		}
	}
	if _, err := wr.Exec(); err != nil {
		return ChargeResult{}, err
	}
	return plan.result, wr.Close()
}

// lockChargeHead locks the account behind a key hash and reads the key with it.
const lockChargeHead = `SELECT k.key_id, k.state, k.grace_until, a.account_id, a.balance, a.version
	FROM api_keys k JOIN accounts a ON a.account_id = k.account_id
	WHERE k.key_hash = $1 FOR UPDATE OF a`

const (
	insertClaimsSQL = `INSERT INTO dedup_claims (account_id, day, resource) SELECT $1, $2, unnest($3::text[])`
	updateHeadSQL   = `UPDATE accounts SET version = $2, balance = $3 WHERE account_id = $1`
)

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

// chargePlan is what a charge will write: the event (nil when nothing is served) and the
// claims of what it pays.
type chargePlan struct {
	result ChargeResult
	event  *eventstore.NewEvent
	claims []string
}

// planCharge decides a charge for a locked head: re-check the key (a revoke that committed
// after Authenticate wins), decide with the domain, and build the event.
func planCharge(req ChargeRequest, now time.Time, h chargeHead, claimed map[string]bool) (chargePlan, error) {
	k, a := h.key, h.account
	var p chargePlan
	if err := k.Authorize(now); err != nil {
		return p, err
	}
	p.result.Balance = a.balance
	if len(req.Resources) == 0 {
		p.result.Served = []bool{}
		return p, nil
	}
	d, err := domain.DecideCharge(req.Operation, req.Resources, a.balance, func(r string) bool { return claimed[r] })
	if err != nil {
		return p, err
	}
	day := domain.Day(now)
	p.result.ChargeDecision = d
	p.result.Balance = a.balance - d.Credits
	meta := eventstore.Metadata{RequestID: req.RequestID, Actor: "key:" + k.ID}
	ledger := domain.Ledger{CreditsDelta: -d.Credits, BalanceAfter: p.result.Balance}
	if len(d.Paid) == 0 {
		p.event = &eventstore.NewEvent{Type: domain.EventRequestDeduplicated, Metadata: meta, Payload: domain.RequestDeduplicated{
			AccountID: a.id, KeyID: k.ID, RequestID: req.RequestID, Operation: req.Operation, Day: day,
			Deduplicated: d.Deduplicated, Ledger: ledger}}
		return p, nil
	}
	p.event = &eventstore.NewEvent{Type: domain.EventRequestCharged, Metadata: meta, Payload: domain.RequestCharged{
		AccountID: a.id, KeyID: k.ID, RequestID: req.RequestID, Operation: req.Operation, Day: day,
		Paid: d.Paid, Deduplicated: d.Deduplicated, OmittedUnpaid: d.OmittedUnpaid, Ledger: ledger}}
	p.claims = d.Paid
	return p, nil
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
