package commands

import (
	"context"
	"errors"
	"maps"
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
	// MaxBatch bounds the charges sharing one transaction (default 64).
	MaxBatch int
	// Workers is how many batch transactions may be in flight at once, each on its own
	// connection (default 4).
	Workers int
	// BeforeBatch, when set, is called by a worker with the size of the batch it took, before
	// the batch's transaction begins. For metrics and tests; it must not call the committer.
	BeforeBatch func(size int)
}

// GroupCommitter runs concurrent charges in shared transactions: a worker takes every
// charge waiting (up to MaxBatch), decides them all from one locked read of their accounts
// with the same planning step as Charger's single transaction, and writes them with a few
// set-based statements and one commit, so a batch pays for one commit and one WAL flush.
// A refused charge (insufficient credits, unknown or revoked key) fails alone; a charge
// whose write breaks a statement is found by running the batch's charges one by one.
// Answers are given only after the COMMIT: if the transaction fails, every charge of the
// batch gets the error and nothing of it was charged.
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

// commitBatch runs the batch's charges in one transaction with set-based statements: one
// pipelined round trip locks every account of the batch (in account-id order) and reads
// their claims for today; the domain then decides each charge in order in memory, carrying
// each account's balance, version and claims from one charge to the next; a second round
// trip writes all claims, one append per account, the heads and COMMIT. A refusal is decided
// in memory and writes nothing. If a statement fails, the transaction is rolled back and
// every charge is run again on its own, so a charge that breaks a statement fails alone.
func (g *GroupCommitter) commitBatch(ctx context.Context, batch []*pendingCharge) error {
	if err := g.accounts.resolve(ctx, g.store, batch); err != nil {
		return err
	}
	slices.SortStableFunc(batch, func(a, b *pendingCharge) int { return strings.Compare(a.account, b.account) })
	var live []*pendingCharge
	for _, p := range batch {
		p.res, p.err = ChargeResult{}, nil
		switch {
		case p.account == "":
			p.err = domain.ErrInvalidKey
		case p.ctx.Err() != nil:
			// The waiter has gone: charging it now would spend credits nobody sees.
			p.err = p.ctx.Err()
		default:
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil
	}
	now := g.clock().UTC()
	err := g.withConn(ctx, func(conn *pgx.Conn) error { return g.setBased(ctx, conn, live, now) })
	var pgErr *pgconn.PgError
	if err == nil || isLockConflict(err) || !(errors.As(err, &pgErr) || errors.Is(err, eventstore.ErrVersionConflict)) {
		return err
	}
	// A statement failed: find the charge that broke it by running each on its own.
	for _, p := range live {
		p.res, p.err = ChargeResult{}, nil
		if err := g.withConn(ctx, func(conn *pgx.Conn) error {
			p.res, p.err = chargePipelined(ctx, conn, p.req, now)
			return p.err
		}); err != nil && p.err == nil {
			p.err = err
		}
	}
	return nil
}

// withConn runs fn on a pooled connection and leaves no transaction open on it.
func (g *GroupCommitter) withConn(ctx context.Context, fn func(*pgx.Conn) error) error {
	c, err := g.store.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	err = fn(c.Conn())
	if err != nil && c.Conn().PgConn().TxStatus() != 'I' {
		if _, rbErr := c.Exec(ctx, "ROLLBACK"); rbErr != nil {
			_ = c.Conn().Close(ctx)
		}
	}
	return err
}

// accountState is an account's head as the batch moves it.
type accountState struct {
	account
	startVersion int64
	claimed      map[string]bool
	events       []eventstore.NewEvent
}

func (g *GroupCommitter) setBased(ctx context.Context, conn *pgx.Conn, live []*pendingCharge, now time.Time) error {
	day := domain.Day(now)
	hashes := make([][]byte, 0, len(live))
	var claimAccounts, claimResources []string
	for _, p := range live {
		hashes = append(hashes, p.req.KeyHash[:])
		for _, r := range p.req.Resources {
			claimAccounts, claimResources = append(claimAccounts, p.account), append(claimResources, r)
		}
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// The sort runs below the row locks, so accounts are locked in account-id order.
	b.Queue(`SELECT k.key_hash, k.key_id, k.state, k.grace_until, a.account_id, a.balance, a.version
		FROM api_keys k JOIN accounts a ON a.account_id = k.account_id
		WHERE k.key_hash = ANY($1) ORDER BY a.account_id FOR UPDATE OF a`, hashes)
	b.Queue(`SELECT d.account_id, d.resource FROM dedup_claims d
		JOIN unnest($2::text[], $3::text[]) AS c(account_id, resource) ON c.account_id = d.account_id AND c.resource = d.resource
		WHERE d.day = $1`, day, claimAccounts, claimResources)
	keys := map[domain.KeyHash]domain.Key{}
	accounts := map[string]*accountState{}
	br := conn.SendBatch(ctx, b)
	err := readLockedBatch(br, keys, accounts)
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}

	var newClaimAccounts, newClaims []string
	for _, p := range live {
		k, ok := keys[p.req.KeyHash]
		if !ok {
			p.err = domain.ErrInvalidKey
			continue
		}
		a := accounts[k.AccountID]
		plan, err := planCharge(p.req, now, chargeHead{key: k, account: a.account}, a.claimed)
		if err != nil {
			p.err = err
			continue
		}
		p.res = plan.result
		if plan.event == nil {
			continue
		}
		a.events = append(a.events, *plan.event)
		a.version++
		a.balance = plan.result.Balance
		for _, r := range plan.claims {
			a.claimed[r] = true
			newClaimAccounts, newClaims = append(newClaimAccounts, a.id), append(newClaims, r)
		}
	}

	w := &pgx.Batch{}
	if len(newClaims) > 0 {
		w.Queue(`INSERT INTO dedup_claims (account_id, day, resource) SELECT a, $1, r FROM unnest($2::text[], $3::text[]) AS u(a, r)`,
			day, newClaimAccounts, newClaims)
	}
	var ops []*eventstore.AppendOp
	var heads []string
	var versions, balances []int64
	for _, id := range slices.Sorted(maps.Keys(accounts)) {
		a := accounts[id]
		if len(a.events) == 0 {
			continue
		}
		op, err := eventstore.NewAppendOp(domain.AccountStream(id), a.startVersion, now, a.events...)
		if err != nil {
			return err
		}
		ops = append(ops, op)
		w.Queue(op.SQL, op.Args...)
		heads, versions, balances = append(heads, id), append(versions, a.version), append(balances, a.balance)
	}
	if len(heads) > 0 {
		w.Queue(`UPDATE accounts SET version = u.v, balance = u.b FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(id, v, b)
			WHERE accounts.account_id = u.id`, heads, versions, balances)
	}
	w.Queue("COMMIT")
	wr := conn.SendBatch(ctx, w)
	err = writeBatchResults(wr, len(newClaims) > 0, ops, len(heads) > 0)
	if closeErr := wr.Close(); err == nil {
		err = closeErr
	}
	return err
}

// readLockedBatch reads the locked heads and today's claims of a batch.
func readLockedBatch(br pgx.BatchResults, keys map[domain.KeyHash]domain.Key, accounts map[string]*accountState) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	var hash []byte
	var k domain.Key
	var a account
	rows, err := br.Query()
	if err != nil {
		return err
	}
	if _, err := pgx.ForEachRow(rows, []any{&hash, &k.ID, &k.State, &k.GraceUntil, &a.id, &a.balance, &a.version}, func() error {
		k.AccountID = a.id
		keys[domain.KeyHash(hash)] = k
		accounts[a.id] = &accountState{account: a, startVersion: a.version, claimed: map[string]bool{}}
		return nil
	}); err != nil {
		return err
	}
	var id, r string
	rows, err = br.Query()
	if err != nil {
		return err
	}
	_, err = pgx.ForEachRow(rows, []any{&id, &r}, func() error {
		if a := accounts[id]; a != nil {
			a.claimed[r] = true
		}
		return nil
	})
	return err
}

// writeBatchResults reads the outcome of a batch's writes and its COMMIT, in queue order.
func writeBatchResults(wr pgx.BatchResults, claims bool, ops []*eventstore.AppendOp, heads bool) error {
	if claims {
		if _, err := wr.Exec(); err != nil {
			return err
		}
	}
	for _, op := range ops {
		if err := op.Check(wr.Exec()); err != nil {
			return err
		}
	}
	if heads {
		if _, err := wr.Exec(); err != nil {
			return err
		}
	}
	_, err := wr.Exec()
	return err
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
