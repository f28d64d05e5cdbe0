package commands

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// ErrMeterClosed answers a charge submitted after Close.
var ErrMeterClosed = errors.New("commands: meter closed")

// ChargeRequest is one metered request: who makes it (from authentication), the operation and
// the resources it serves (one for a fixed-cost operation; the result rows, in order, for a
// per-row one).
type ChargeRequest struct {
	Caller
	Operation domain.Operation
	Resources []string
}

// ChargeResult is the metering outcome the read API reports in meta.
type ChargeResult struct {
	domain.ChargeDecision
	Balance int64
}

// MeterOptions tune a Meter; zero values take the defaults.
type MeterOptions struct {
	// MaxBatch bounds the charges sharing one transaction (default 1024). A worker takes every
	// charge waiting, up to this, so batches grow with load.
	MaxBatch int
	// Workers is how many batches may be in flight at once (default 2), each on its own
	// connection. An account's charges always go to the same worker (its lane), so a
	// process's batches never wait for each other's account locks; with two, under heavy
	// load, one lane decides and encodes its batch while PostgreSQL writes the other's.
	Workers int
	// OverlapAt (default 32, at most MaxBatch) is the load from which the lanes write their
	// batches side by side. Below it, a batch starts only when none is in flight, and takes
	// the charges of every lane: under moderate load the process writes one batch after
	// another, each about twice as large as a lane's, and a batch's fixed cost in PostgreSQL
	// (its statements' start, the lock statement, the COMMIT and its WAL flush) is shared by
	// twice as many charges. A lane holding OverlapAt charges, or any lane while the batches in
	// flight hold that many, starts its own batch at once, beside the others: under heavy
	// load, overlapping batches keep both PostgreSQL and this process busy.
	// docs/architecture.md, "The path of a metered request", has the measurements.
	OverlapAt int
	// MaxClaims bounds the dedup claims the meter keeps in memory (default DefaultMaxClaims).
	MaxClaims int
	// MaxAccounts bounds the accounts whose state the meter keeps in memory (default
	// DefaultMaxAccounts).
	MaxAccounts int
	// BeforeBatch, when set, hears the size of every batch a worker takes (metrics, tests).
	BeforeBatch func(size int)
	// OnClaimsRead, when set, hears how many accounts of a batch had their dedup claims read
	// (Meter.readClaims): behind, after claims the meter held; cold, from the day's claim
	// chunks and the charges after them.
	OnClaimsRead func(behind, cold int)
	// OnDecided, when set, hears how a batch's charges were decided: from the state the meter
	// held (one round trip), or from reads under the accounts' locks (two or three).
	OnDecided func(fromMemory, underLock int)
	// BatchWait bounds a batch's round trips to PostgreSQL (default 10 s): a connection that
	// has not answered by then is taken for lost (see batchWait in charge.go). The key cache's
	// reads of the table are bounded by it too.
	BatchWait time.Duration
	// LockWait bounds how long a batch decided under the lock waits for its accounts' row
	// locks (default 2 s, at most half of BatchWait): an account another transaction holds
	// longer fails its charges, 503 unavailable, nothing charged (a known rollback, not a lost
	// batch). The batch decided from memory never waits for a row lock: kyapi_charge skips an
	// account it cannot lock at once (migration 0027) and the meter decides it again this way.
	LockWait time.Duration
	// HeldWait (default LockWait/20, at least a millisecond, at most LockWait) is how long a
	// batch waits for the row of an account whose row another transaction held past the wait
	// the last time (heldAccounts): while it stays held, its charges fail after HeldWait, not
	// LockWait, and the batches of the process, which wait for them, with them; once it is let
	// go its next charge takes it as ever.
	HeldWait time.Duration
	// Hooks let tests act where failures matter; nil in production.
	Hooks MeterHooks
}

// MeterHooks are called at the two points of a batch's transaction where a failure decides
// what its answers may say. cut closes its connection from the client's side; pid is its
// server process (a test can end it from the server's side).
type MeterHooks struct {
	// BeforeWrite runs after the batch's decisions, before its writes and COMMIT are sent.
	BeforeWrite func(cut func())
	// AfterCommitSent runs once the writes and COMMIT are sent, before their outcome is read.
	AfterCommitSent func(pid uint32, cut func())
}

// Meter authenticates API keys (KeyCache) and charges metered requests. Every decision is
// checked against the write model under the accounts' row locks before anything decided from
// it is written, so it is exact across any number of processes sharing the database.
//
// Charges are committed in batches (group commit): a worker takes every charge waiting and
// writes them in one transaction (docs/architecture.md, "The path of a metered request"). For
// the accounts whose state it holds (accountState: balance, stream head, claims day, keys, and
// the day's dedup claims, current through the head), the meter decides in memory and sends the
// whole batch in one round trip — BEGIN, kyapi_charge, COMMIT — where kyapi_charge locks the
// accounts (in account-id order, so batches in any number of processes cannot deadlock),
// checks that each is as the decisions assumed (head unmoved, keys unchanged), and writes the
// accounts that are, set-based: their events (eventstore.Batch, chained), balances and totals,
// and claim chunks. An account found changed (another process charged it, a key was revoked)
// is written nothing and its charges are decided again the other way: a first round trip locks
// the accounts and reads their state in statements that start after the locks are held — so
// they see every commit before them — and the dedup claims the meter lacks; the decisions are
// then written by the same kyapi_charge and COMMIT. Refusals (402, a key revoked or unknown)
// write nothing.
//
// Answers are given only once the outcome is known. If the connection is lost after the
// writes were sent, the meter ends the server process that ran them (if it still runs) and
// then reads whether the batch's events are in the store: those accounts' charges were
// committed and their paid answers are served; the others fail as unavailable (nothing was
// charged); if that cannot be found out in time, they fail with domain.ErrOutcomeUnknown,
// never "nothing charged". A charge already taken into a batch waits for the batch even if its
// request is cancelled.
type Meter struct {
	store *eventstore.Store
	clock func() time.Time
	opts  MeterOptions
	keys  *KeyCache

	claims *claimCache
	states *stateCache
	held   heldAccounts

	// mu guards the lanes' queues and the batches in flight; each lane's worker waits on its
	// own condition of it.
	mu       sync.Mutex
	lanes    []*lane
	inCharge int // charges in the batches being written (none in flight when 0: a batch holds one or more)
	closed   bool
	workers  sync.WaitGroup
}

// lane is one worker's queue. An account's charges always go to the same lane, so a process's
// own batches never wait for each other's account locks (two workers sharing accounts take
// turns on them, each batch smaller and each waiting for the other's COMMIT), and, as a lane
// starts no batch while one holding its charges is in flight (busy; a sweep may hold several
// lanes'), at most one batch of the process is in flight per account, which the state the
// meter keeps relies on.
type lane struct {
	wake  *sync.Cond // on Meter.mu
	queue []*pendingCharge
	busy  bool // a batch holding charges of this lane is in flight
}

// pendingCharge is one submitted charge and, once its batch ends, its answer.
type pendingCharge struct {
	req   ChargeRequest
	taken bool // by a worker; from then on it is answered only by its batch
	res   ChargeResult
	err   error
	done  chan struct{}
}

// NewMeter starts a meter's workers over store. Close stops them.
func NewMeter(store *eventstore.Store, clock func() time.Time, opts MeterOptions) *Meter {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 1024
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.OverlapAt <= 0 {
		opts.OverlapAt = 32
	}
	opts.OverlapAt = min(opts.OverlapAt, opts.MaxBatch)
	if opts.BatchWait <= 0 {
		opts.BatchWait = batchWait
	}
	if opts.LockWait <= 0 {
		opts.LockWait = lockWait
	}
	opts.LockWait = min(opts.LockWait, opts.BatchWait/2)
	if opts.HeldWait <= 0 {
		opts.HeldWait = max(opts.LockWait/20, time.Millisecond)
	}
	opts.HeldWait = min(opts.HeldWait, opts.LockWait)
	m := &Meter{store: store, clock: clock, opts: opts, keys: NewKeyCache(store.Pool),
		claims: newClaimCache(opts.MaxClaims), states: newStateCache(opts.MaxAccounts)}
	m.keys.LookupWait = opts.BatchWait
	m.workers.Add(opts.Workers)
	for range opts.Workers {
		l := &lane{wake: sync.NewCond(&m.mu)}
		m.lanes = append(m.lanes, l)
		go m.work(l)
	}
	return m
}

// laneOf is the lane that meters an account's charges.
func (m *Meter) laneOf(accountID string) *lane {
	if len(m.lanes) == 1 {
		return m.lanes[0]
	}
	h := fnv.New32a()
	h.Write([]byte(accountID))
	return m.lanes[h.Sum32()%uint32(len(m.lanes))]
}

// ClaimsHeld is how many dedup claims the meter keeps in memory (at most MeterOptions.MaxClaims,
// but for the account being charged).
func (m *Meter) ClaimsHeld() int { return m.claims.held() }

// ClaimsForgotten is how many times the meter forgot an account's dedup claims to stay within
// MeterOptions.MaxClaims (a new UTC day forgetting the day before is not counted). Each is read
// back from the store when the account is next charged: steadily rising under load, it means
// the day's claims outgrow the bound (docs/operations.md, "The maintenance loop").
func (m *Meter) ClaimsForgotten() int64 { return m.claims.forgottenForBound() }

// AccountsHeld is how many accounts' state the meter keeps in memory.
func (m *Meter) AccountsHeld() int { return m.states.held() }

// Keys is the meter's key cache (for Listen, and for commands to forget changed keys).
func (m *Meter) Keys() *KeyCache { return m.keys }

// Authenticate resolves a key hash to its caller (see KeyCache).
func (m *Meter) Authenticate(ctx context.Context, hash domain.KeyHash) (Caller, error) {
	return m.keys.Authenticate(ctx, hash, m.clock().UTC())
}

// Verify reads the key's state from the write model, bypassing the cache (see KeyCache.Verify).
// Its read is bounded as a batch is (KeyCache.LookupWait): a database that does not answer (a
// partition) must not hold the request for ever; the caller then keeps the answer it had.
func (m *Meter) Verify(ctx context.Context, hash domain.KeyHash) error {
	return m.keys.Verify(ctx, hash, m.clock().UTC())
}

// Close lets the workers finish the charges already submitted, then stops them. Charges
// submitted afterwards get ErrMeterClosed.
func (m *Meter) Close() {
	m.mu.Lock()
	m.closed = true
	for _, l := range m.lanes {
		l.wake.Broadcast()
	}
	m.mu.Unlock()
	m.workers.Wait()
}

// Pending is the number of charges waiting for a worker.
func (m *Meter) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, l := range m.lanes {
		n += len(l.queue)
	}
	return n
}

// Charge meters req in the next batch and waits for its own answer.
func (m *Meter) Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error) {
	if err := ctx.Err(); err != nil {
		return ChargeResult{}, err
	}
	p := &pendingCharge{req: req, done: make(chan struct{})}
	l := m.laneOf(req.AccountID)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ChargeResult{}, ErrMeterClosed
	}
	l.queue = append(l.queue, p)
	l.wake.Signal()
	m.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		m.mu.Lock()
		if !p.taken {
			l.queue = slices.DeleteFunc(l.queue, func(q *pendingCharge) bool { return q == p })
			m.mu.Unlock()
			return ChargeResult{}, ctx.Err()
		}
		m.mu.Unlock()
		<-p.done // its batch is running: the answer must say what it did
	}
	return p.res, p.err
}

// work is lane l's worker. Under load below MeterOptions.OverlapAt it waits for no batch to be
// in flight, then takes the charges of every lane (a sweep); from it, every charge waiting in
// l, up to MaxBatch. A lane whose charges a batch holds starts no other batch until it ends, so
// at most one batch of the process is in flight per account either way.
func (m *Meter) work(l *lane) {
	defer m.workers.Done()
	m.mu.Lock()
	for {
		if len(l.queue) == 0 {
			if m.closed {
				m.mu.Unlock()
				return
			}
			l.wake.Wait()
			continue
		}
		var batch []*pendingCharge
		var took []*lane
		switch {
		case l.busy: // a sweep holds some of its charges
			l.wake.Wait()
			continue
		case m.closed || len(l.queue) >= m.opts.OverlapAt || m.inCharge >= m.opts.OverlapAt:
			batch, took = m.take(l, nil), []*lane{l}
		case m.inCharge == 0:
			for _, o := range m.lanes {
				if len(o.queue) > 0 && len(batch) < m.opts.MaxBatch {
					batch, took = m.take(o, batch), append(took, o)
				}
			}
		default:
			l.wake.Wait() // for the batches in flight to end, or to grow
			continue
		}
		for _, o := range took {
			o.busy = true
		}
		m.inCharge += len(batch)
		if m.inCharge >= m.opts.OverlapAt {
			m.wakeLanes() // the others may now start beside it
		}
		m.mu.Unlock()
		if m.opts.BeforeBatch != nil {
			m.opts.BeforeBatch(len(batch))
		}
		m.runBatch(batch)
		m.mu.Lock()
		for _, o := range took {
			o.busy = false
		}
		m.inCharge -= len(batch)
		m.wakeLanes()
	}
}

// take moves the charges waiting in l to batch, up to MaxBatch in all. m.mu is held.
func (m *Meter) take(l *lane, batch []*pendingCharge) []*pendingCharge {
	n := min(len(l.queue), m.opts.MaxBatch-len(batch))
	for _, p := range l.queue[:n] {
		p.taken = true
	}
	batch = append(batch, l.queue[:n]...)
	l.queue = slices.Delete(l.queue, 0, n)
	return batch
}

// wakeLanes wakes every lane's worker to look again at the batches in flight. m.mu is held.
func (m *Meter) wakeLanes() {
	for _, o := range m.lanes {
		o.wake.Signal()
	}
}
