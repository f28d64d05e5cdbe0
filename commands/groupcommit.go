package commands

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// ErrGroupCommitterClosed answers a charge submitted after Close.
var ErrGroupCommitterClosed = errors.New("commands: group committer closed")

// GroupCommitOptions tune a GroupCommitter; zero values take the defaults.
type GroupCommitOptions struct {
	// MaxBatch bounds the charges sharing one transaction (default 64: past 64 savepoints
	// PostgreSQL overflows its per-backend subtransaction cache and every session slows).
	MaxBatch int
	// Workers is how many batch transactions may be in flight at once, each on its own
	// connection (default 4).
	Workers int
	// BeforeBatch, when set, is called by a worker with the size of the batch it took, before
	// the batch's transaction begins. For metrics and tests; it must not call the committer.
	BeforeBatch func(size int)
}

// GroupCommitter runs concurrent charges in shared transactions: a worker takes every
// charge waiting (up to MaxBatch), runs each under its own SAVEPOINT with the same steps as
// Charger's single transaction, and commits once, so a batch pays for one commit and one
// WAL flush. A charge that fails (refused, unknown or revoked key, SQL error) is rolled
// back to its savepoint and fails alone; the others commit. Answers are given only after
// the COMMIT: if the transaction fails, every charge of the batch gets the error and
// nothing of it was charged.
//
// A batch locks its accounts in account-id order, like GrantBonus, so batches in any
// number of processes cannot deadlock each other; a batch that still fails with a
// deadlock or a serialization failure is run once more before it fails.
//
// A waiter whose ctx ends gets ctx.Err() at once. If its charge already ran in a batch,
// the batch still commits: the charge happened and the client did not see the answer. A
// retry the same UTC day is free, as the resources are claimed.
type GroupCommitter struct {
	store    *eventstore.Store
	clock    func() time.Time
	opts     GroupCommitOptions
	accounts keyAccounts

	mu      sync.Mutex
	wake    *sync.Cond
	queue   []*pendingCharge
	closed  bool
	workers sync.WaitGroup
}

// pendingCharge is one submitted charge and, once its batch ends, its answer.
type pendingCharge struct {
	ctx     context.Context
	req     ChargeRequest
	account string // from the key; "" when the key is unknown
	res     ChargeResult
	err     error
	done    chan struct{}
}

// NewGroupCommitter starts a group committer's workers over store. Close stops them.
func NewGroupCommitter(store *eventstore.Store, clock func() time.Time, opts GroupCommitOptions) *GroupCommitter {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 64
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	g := &GroupCommitter{store: store, clock: clock, opts: opts, accounts: keyAccounts{m: map[domain.KeyHash]string{}}}
	g.wake = sync.NewCond(&g.mu)
	g.workers.Add(opts.Workers)
	for range opts.Workers {
		go g.work()
	}
	return g
}

// Close lets the workers finish the charges already submitted, then stops them. Charges
// submitted afterwards get ErrGroupCommitterClosed.
func (g *GroupCommitter) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wake.Broadcast()
	g.workers.Wait()
}

// Pending is the number of charges waiting for a worker.
func (g *GroupCommitter) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// Charge meters req in the next batch and waits for its own answer. It answers as
// Charger.Charge does.
func (g *GroupCommitter) Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error) {
	if err := ctx.Err(); err != nil {
		return ChargeResult{}, err
	}
	p := &pendingCharge{ctx: ctx, req: req, done: make(chan struct{})}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ChargeResult{}, ErrGroupCommitterClosed
	}
	g.queue = append(g.queue, p)
	g.mu.Unlock()
	g.wake.Signal()
	select {
	case <-p.done:
		if p.err != nil {
			return ChargeResult{}, p.err
		}
		return p.res, nil
	case <-ctx.Done():
		return ChargeResult{}, ctx.Err()
	}
}

func (g *GroupCommitter) work() {
	defer g.workers.Done()
	for {
		g.mu.Lock()
		for len(g.queue) == 0 && !g.closed {
			g.wake.Wait()
		}
		if len(g.queue) == 0 {
			g.mu.Unlock()
			return
		}
		n := min(len(g.queue), g.opts.MaxBatch)
		batch := slices.Clone(g.queue[:n])
		g.queue = slices.Delete(g.queue, 0, n)
		more := len(g.queue) > 0
		g.mu.Unlock()
		if more {
			g.wake.Signal()
		}
		if g.opts.BeforeBatch != nil {
			g.opts.BeforeBatch(len(batch))
		}
		g.runBatch(batch)
	}
}

// runBatch runs a batch and answers every charge in it.
func (g *GroupCommitter) runBatch(batch []*pendingCharge) {
	// The batch's statements run under the committer's context, not the waiters': a
	// cancelled query would break the connection and with it everyone's transaction.
	ctx := context.Background()
	err := g.commitBatch(ctx, batch)
	if isLockConflict(err) {
		err = g.commitBatch(ctx, batch)
	}
	if err == nil {
		g.store.Appended()
	}
	for _, p := range batch {
		if err != nil {
			p.res, p.err = ChargeResult{}, err
		}
		close(p.done)
	}
}

// commitBatch runs the batch's charges in one transaction, each under its own savepoint, in
// account-id order. It sets each charge's answer; they stand only if it returns nil.
func (g *GroupCommitter) commitBatch(ctx context.Context, batch []*pendingCharge) error {
	if err := g.accounts.resolve(ctx, g.store, batch); err != nil {
		return err
	}
	slices.SortStableFunc(batch, func(a, b *pendingCharge) int { return strings.Compare(a.account, b.account) })
	return pgx.BeginFunc(ctx, g.store.Pool, func(tx pgx.Tx) error {
		savepoint := noSavepoint
		for _, p := range batch {
			p.res, p.err = ChargeResult{}, nil
			if p.account == "" {
				p.err = domain.ErrInvalidKey
				continue
			}
			if err := p.ctx.Err(); err != nil {
				// The waiter has gone: charging it now would spend credits nobody sees.
				p.err = err
				continue
			}
			res, err := g.chargeUnderSavepoint(ctx, tx, p, savepoint)
			if errors.Is(err, errSavepoint) {
				return err
			}
			if err == nil {
				p.res, savepoint = res, dirtySavepoint
				continue
			}
			if isLockConflict(err) {
				return err
			}
			if _, rbErr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT charge`); rbErr != nil {
				return rbErr
			}
			p.err, savepoint = err, freshSavepoint
		}
		return nil
	})
}

// savepointState says what a batch must do before its next charge: create the savepoint,
// release the previous charge's and create a new one, or reuse the one it rolled back to.
type savepointState int

const (
	noSavepoint savepointState = iota
	dirtySavepoint
	freshSavepoint
)

// errSavepoint wraps a failure to set the savepoint: the transaction cannot go on.
var errSavepoint = errors.New("commands: group commit savepoint")

// chargeUnderSavepoint runs one charge of a batch after setting its savepoint. The
// savepoint, the account lock and the read of today's claims go in one round trip; the
// claims are read by the account the key resolved to, which the lock then confirms.
func (g *GroupCommitter) chargeUnderSavepoint(ctx context.Context, tx pgx.Tx, p *pendingCharge, sp savepointState) (ChargeResult, error) {
	now := g.clock().UTC()
	day := domain.Day(now)
	b := &pgx.Batch{}
	switch sp {
	case noSavepoint:
		b.Queue(`SAVEPOINT charge`)
	case dirtySavepoint:
		b.Queue(`RELEASE SAVEPOINT charge`)
		b.Queue(`SAVEPOINT charge`)
	}
	steps := b.Len()
	b.Queue(lockChargeHead, p.req.KeyHash[:])
	if len(p.req.Resources) > 0 {
		b.Queue(claimsTodaySQL, p.account, day, p.req.Resources)
	}
	br := tx.SendBatch(ctx, b)
	for range steps {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return ChargeResult{}, fmt.Errorf("%w: %w", errSavepoint, err)
		}
	}
	h, err := scanChargeHead(br.QueryRow())
	var claimed map[string]bool
	var claimsErr error
	if len(p.req.Resources) > 0 {
		claimed, claimsErr = collectClaims(br.Query())
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return ChargeResult{}, err
	}
	return chargeLocked(ctx, g.store, tx, p.req, now, h, func() (map[string]bool, error) {
		if h.account.id != p.account {
			return claimsToday(ctx, tx, h.account.id, day, p.req.Resources)
		}
		return claimed, claimsErr
	})
}

// isLockConflict tells a deadlock or serialization failure, after which the whole
// transaction can only be rolled back and tried again.
func isLockConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// keyAccounts remembers the account behind each key hash; a key never changes account.
type keyAccounts struct {
	mu sync.Mutex
	m  map[domain.KeyHash]string
}

// maxKeyAccounts bounds the cache; when full it starts over.
const maxKeyAccounts = 100_000

// resolve sets the account of every charge in batch, asking the database, in one query,
// only for the keys it has not seen. Unknown keys are left with no account.
func (c *keyAccounts) resolve(ctx context.Context, store *eventstore.Store, batch []*pendingCharge) error {
	var missing [][]byte
	c.mu.Lock()
	for _, p := range batch {
		if id, ok := c.m[p.req.KeyHash]; ok {
			p.account = id
		} else {
			missing = append(missing, p.req.KeyHash[:])
		}
	}
	c.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	rows, err := store.Pool.Query(ctx, `SELECT key_hash, account_id FROM api_keys WHERE key_hash = ANY($1)`, missing)
	if err != nil {
		return err
	}
	found := map[domain.KeyHash]string{}
	var hash []byte
	var id string
	_, err = pgx.ForEachRow(rows, []any{&hash, &id}, func() error {
		found[domain.KeyHash(hash)] = id
		return nil
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	if len(c.m)+len(found) > maxKeyAccounts {
		clear(c.m)
	}
	for h, id := range found {
		c.m[h] = id
	}
	c.mu.Unlock()
	for _, p := range batch {
		if p.account == "" {
			p.account = found[p.req.KeyHash]
		}
	}
	return nil
}
