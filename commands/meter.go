package commands

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// Workers is how many batch transactions may be in flight at once, each on its own
	// connection (default 2).
	Workers int
	// MaxClaims bounds the dedup claims the meter keeps in memory (default DefaultMaxClaims).
	MaxClaims int
	// BeforeBatch, when set, hears the size of every batch a worker takes (metrics, tests).
	BeforeBatch func(size int)
	// OnClaimsRead, when set, hears how many accounts of a batch had their dedup claims read
	// (Meter.readClaims): behind, after claims the meter held; cold, from the day's claim
	// chunks and the charges after them.
	OnClaimsRead func(behind, cold int)
	// Hooks let tests act where failures matter; nil in production.
	Hooks MeterHooks
}

// MeterHooks are called at the two points of a batch's transaction where a failure decides
// what its answers may say. txid is the transaction's id; cut closes its connection from the
// client's side; pid is its server process (a test can end it from the server's side).
type MeterHooks struct {
	// BeforeWrite runs after the batch's decisions, before its writes and COMMIT are sent.
	BeforeWrite func(txid string, cut func())
	// AfterCommitSent runs once the writes and COMMIT are sent, before their outcome is read.
	AfterCommitSent func(txid string, pid uint32, cut func())
}

// Meter authenticates API keys (KeyCache) and charges metered requests. It decides from the
// write model under the accounts' row locks, so the decision is exact across any number of
// processes sharing the database.
//
// Charges are committed in batches (group commit): a worker takes every charge waiting and
// runs them in one transaction of two round trips. The first locks every account of the batch
// (in account-id order, so batches in any number of processes cannot deadlock) and then — in
// statements that start after the lock is held, so they see every commit before it — reads the
// keys' states, the accounts' stream heads and today's dedup claims, and the transaction's id.
// The domain then decides each charge in order, carrying each account's balance and claims from
// one charge to the next. The second round trip writes the batch set-based: one insert of all
// claims, one append statement for every account's events (eventstore.Batch; it aborts the
// transaction if a head moved), one update of all accounts' balances and totals, and COMMIT.
// A refusal (402, a key revoked or unknown) is decided in memory and writes nothing. An idle
// meter runs each charge as a batch of one.
//
// Answers are given only once the outcome is known. If the connection is lost after COMMIT
// was sent, the meter asks the database (by the transaction id it read) whether the commit
// happened: committed, the paid answers are served; rolled back, the charges fail as
// unavailable; unknowable, they fail with domain.ErrOutcomeUnknown, never "nothing charged". A
// charge already taken into a batch waits for the batch even if its request is cancelled.
type Meter struct {
	store *eventstore.Store
	clock func() time.Time
	opts  MeterOptions
	keys  *KeyCache

	claims *claimCache

	mu      sync.Mutex
	wake    *sync.Cond
	queue   []*pendingCharge
	closed  bool
	workers sync.WaitGroup
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
	m := &Meter{store: store, clock: clock, opts: opts, keys: NewKeyCache(store.Pool), claims: newClaimCache(opts.MaxClaims)}
	m.wake = sync.NewCond(&m.mu)
	m.workers.Add(opts.Workers)
	for range opts.Workers {
		go m.work()
	}
	return m
}

// ClaimsHeld is how many dedup claims the meter keeps in memory (at most MeterOptions.MaxClaims,
// but for the account being charged).
func (m *Meter) ClaimsHeld() int { return m.claims.held() }

// Keys is the meter's key cache (for Listen, and for commands to forget changed keys).
func (m *Meter) Keys() *KeyCache { return m.keys }

// Authenticate resolves a key hash to its caller (see KeyCache).
func (m *Meter) Authenticate(ctx context.Context, hash domain.KeyHash) (Caller, error) {
	return m.keys.Authenticate(ctx, hash, m.clock().UTC())
}

// Verify reads the key's state from the write model, bypassing the cache (see KeyCache.Verify).
func (m *Meter) Verify(ctx context.Context, hash domain.KeyHash) error {
	return m.keys.Verify(ctx, hash, m.clock().UTC())
}

// Close lets the workers finish the charges already submitted, then stops them. Charges
// submitted afterwards get ErrMeterClosed.
func (m *Meter) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.wake.Broadcast()
	m.workers.Wait()
}

// Pending is the number of charges waiting for a worker.
func (m *Meter) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}

// Charge meters req in the next batch and waits for its own answer.
func (m *Meter) Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error) {
	if err := ctx.Err(); err != nil {
		return ChargeResult{}, err
	}
	p := &pendingCharge{req: req, done: make(chan struct{})}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ChargeResult{}, ErrMeterClosed
	}
	m.queue = append(m.queue, p)
	m.mu.Unlock()
	m.wake.Signal()
	select {
	case <-p.done:
	case <-ctx.Done():
		m.mu.Lock()
		if !p.taken {
			m.queue = slices.DeleteFunc(m.queue, func(q *pendingCharge) bool { return q == p })
			m.mu.Unlock()
			return ChargeResult{}, ctx.Err()
		}
		m.mu.Unlock()
		<-p.done // its batch is running: the answer must say what it did
	}
	return p.res, p.err
}

func (m *Meter) work() {
	defer m.workers.Done()
	for {
		m.mu.Lock()
		for len(m.queue) == 0 && !m.closed {
			m.wake.Wait()
		}
		if len(m.queue) == 0 {
			m.mu.Unlock()
			return
		}
		n := min(len(m.queue), m.opts.MaxBatch)
		batch := slices.Clone(m.queue[:n])
		m.queue = slices.Delete(m.queue, 0, n)
		for _, p := range batch {
			p.taken = true
		}
		more := len(m.queue) > 0
		m.mu.Unlock()
		if more {
			m.wake.Signal()
		}
		if m.opts.BeforeBatch != nil {
			m.opts.BeforeBatch(len(batch))
		}
		m.runBatch(batch)
	}
}

// runBatch runs a batch and answers every charge in it.
func (m *Meter) runBatch(batch []*pendingCharge) {
	err := m.commit(batch)
	var stale *connectionLostBeforeWrite
	if isLockConflict(err) || errors.Is(err, eventstore.ErrNoPartition) || errors.As(err, &stale) {
		if errors.Is(err, eventstore.ErrNoPartition) {
			_, _ = eventstore.EnsurePartitions(context.Background(), m.store.Pool)
		}
		err = m.commit(batch)
	}
	if err != nil && len(batch) > 1 && statementFailed(err) {
		// The transaction was rolled back because a statement failed: find the charge that
		// broke it by running each on its own, so that it fails alone.
		err = nil
		for _, p := range batch {
			if e := m.commit([]*pendingCharge{p}); e != nil {
				p.res, p.err = ChargeResult{}, e
			}
		}
	}
	if err != nil {
		for _, p := range batch {
			p.res, p.err = ChargeResult{}, err
		}
	}
	m.store.Appended()
	for _, p := range batch {
		close(p.done)
	}
}

// statementFailed tells an error after which the database rolled the transaction back
// because one of its statements failed.
func statementFailed(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || errors.Is(err, eventstore.ErrVersionConflict)
}

// connectionLostBeforeWrite is a batch whose connection failed before any write was sent:
// nothing of it was written, and runBatch tries it once more on another connection.
type connectionLostBeforeWrite struct{ err error }

// beforeWrite is the error of a batch that failed before any write was sent: a statement's own
// error, or — the pooled connection had died (a database restart ends them all) — a
// connectionLostBeforeWrite, which a fresh connection may well get past.
func beforeWrite(err error) error {
	if statementRolledBack(err) {
		return err
	}
	return &connectionLostBeforeWrite{err}
}

func (e *connectionLostBeforeWrite) Error() string { return e.err.Error() }
func (e *connectionLostBeforeWrite) Unwrap() error { return e.err }

// statementRolledBack tells an error the server answered to one of a transaction's statements
// at ERROR severity, after which it rolls the transaction back and stays connected. A FATAL or
// PANIC answer (the session or server going away), an operator intervention (class 57) or a
// connection failure (class 08) says nothing certain about a COMMIT already sent.
func statementRolledBack(err error) bool {
	if errors.Is(err, eventstore.ErrVersionConflict) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	class := pgErr.Code[:min(2, len(pgErr.Code))]
	return pgErr.Severity == "ERROR" && class != "57" && class != "08"
}

// isLockConflict tells a deadlock or serialization failure, after which the whole
// transaction can only be rolled back and tried again.
func isLockConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// batchAccount is an account of a batch as the batch moves it.
type batchAccount struct {
	id      string
	no      int32
	balance int64
	// claimsDay and claimsFrom are the account's claims_day (UTC day of its newest charge; ""
	// if never charged) and claims_from (position of its first charge of that day).
	claimsDay  string
	claimsFrom int64
	head       *eventstore.Head
	from       eventstore.Head // the head as read under the lock, before the batch's appends
	now        time.Time       // the batch's time, or the account's last event's if later
	day        string          // UTC day of now: the day its charges claim
	// claims are the account's claims the batch decides with, current through from.Version;
	// nil when the account has none on day.
	claims  *accountClaims
	paid    map[int64]struct{} // resources this batch's charges paid for (hashes)
	saved   int                // claims of claims.unsaved the batch writes in a chunk
	t       totals
	written bool
}

type batchKey struct {
	accountID  string
	state      domain.KeyState
	graceUntil *time.Time
}

const (
	lockAccountsSQL = `SELECT account_id, stream_no, balance, coalesce(claims_day::text, ''), coalesce(claims_from, 0)
		FROM accounts WHERE account_id = ANY($1) ORDER BY account_id FOR UPDATE`
	keyStatesSQL = `SELECT key_id, account_id, state, grace_until FROM api_keys WHERE key_id = ANY($1)`
	// claimEventsSQL reads the charges of each stream $1 after position $2 and version $3 — or,
	// when the stream has claim chunks of day $4, after the last of them — by the events_stream
	// index from that position: an account's claims after its saved ones (from its
	// claims_from if none), or the charges another process (or a batch whose outcome was
	// lost) added since the meter's claims were current ($4 NULL).
	// The events are read in a subquery that OFFSET 0 keeps from being flattened into a join:
	// the plan a prepared statement settles on would otherwise hash-join the whole events
	// table (it guesses ten streams).
	claimEventsSQL = `SELECT u.no, e.payload::text
		FROM unnest($1::int[], $2::bigint[], $3::bigint[], $4::date[]) AS u(no, after_position, after_version, chunks_day)
		CROSS JOIN LATERAL (SELECT coalesce(max(c.position), u.after_position) AS after_position,
				coalesce(max(c.through), u.after_version) AS after_version
			FROM claim_chunks c WHERE c.stream_no = u.no AND c.day = u.chunks_day) s
		CROSS JOIN LATERAL (SELECT e.payload FROM events e
			WHERE e.stream_no = u.no AND e.position > s.after_position AND e.version > s.after_version
				AND e.type = 'RequestCharged' OFFSET 0) e`
	// claimChunksSQL reads the claim chunks of each stream $1 on day $2.
	claimChunksSQL = `SELECT c.stream_no, c.hashes
		FROM unnest($1::int[], $2::date[]) AS u(no, day) JOIN claim_chunks c ON c.stream_no = u.no AND c.day = u.day`
	// insertChunksSQL saves claim chunks (migration 0015).
	insertChunksSQL = `INSERT INTO claim_chunks (stream_no, day, through, position, hashes)
		SELECT * FROM unnest($1::int[], $2::date[], $3::bigint[], $4::bigint[], $5::bytea[]) ON CONFLICT DO NOTHING`
	// updateAccountsSQL moves the balances and totals; an account whose charges in the batch are
	// its first of a new day ($6, NULL for the others) gets that day as claims_day and the
	// position of its first charge after its head before the batch ($7) as claims_from.
	updateAccountsSQL = `UPDATE accounts SET balance = u.b, charged_credits = charged_credits + u.c,
			requests_charged = requests_charged + u.rc, requests_deduplicated = requests_deduplicated + u.rd,
			claims_day = coalesce(u.day::date, accounts.claims_day),
			claims_from = CASE WHEN u.day IS NULL THEN accounts.claims_from ELSE
				(SELECT min(e.position) FROM events e
				 WHERE e.stream_no = accounts.stream_no AND e.position > u.after AND e.type = 'RequestCharged') END
		FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::bigint[])
			AS u(id, b, c, rc, rd, day, after)
		WHERE accounts.account_id = u.id`
)

// commit runs the batch's charges in one transaction (see Meter) and sets each charge's
// answer. An error is the batch's: nothing of it was written, or — domain.ErrOutcomeUnknown —
// it cannot be known whether it was.
func (m *Meter) commit(batch []*pendingCharge) error {
	ctx := context.Background() // a cancelled statement would break everyone's transaction
	for _, p := range batch {
		p.res, p.err = ChargeResult{}, nil
	}
	slices.SortStableFunc(batch, func(a, b *pendingCharge) int { return strings.Compare(a.req.AccountID, b.req.AccountID) })
	var accountIDs, keyIDs []string
	var nos []int32
	for i, p := range batch {
		if i == 0 || p.req.AccountID != batch[i-1].req.AccountID {
			accountIDs, nos = append(accountIDs, p.req.AccountID), append(nos, p.req.StreamNo)
		}
		keyIDs = append(keyIDs, p.req.KeyID)
	}

	conn, err := m.store.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	pc := conn.Conn()
	leave := func(err error) error {
		// Leave no transaction open on a pooled connection; a broken one is discarded.
		if pc.PgConn().TxStatus() != 'I' {
			if _, rbErr := pc.Exec(ctx, "ROLLBACK"); rbErr != nil {
				_ = pc.Close(ctx)
			}
		}
		return err
	}

	// Round trip 1: lock, then read what the decisions need, then the transaction's id.
	rb := &pgx.Batch{}
	rb.Queue("BEGIN")
	rb.Queue(lockAccountsSQL, accountIDs)
	rb.Queue(keyStatesSQL, keyIDs)
	rb.Queue(eventstore.HeadsByNoSQL, nos)
	rb.Queue(`SELECT pg_current_xact_id()::text`)
	accounts := map[string]*batchAccount{}
	keys := map[string]batchKey{}
	var txid string
	br := pc.SendBatch(ctx, rb)
	err = readRound1(br, accounts, keys, &txid)
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return leave(beforeWrite(err))
	}
	// The charges' time is read once the locks are held: a revoke, a grace period ending,
	// midnight are seen as of then. Within a stream time never goes backwards: an account whose
	// last event is later than now (another process's clock ahead of this one's) charges at
	// that event's time, and claims on its day.
	now := m.clock().UTC().Truncate(time.Microsecond)
	m.claims.newDay(now)
	for _, a := range accounts {
		if a.head != nil {
			a.from = *a.head
			a.now = now
			if a.now.Before(a.head.At) {
				a.now = a.head.At
			}
			a.day = domain.Day(a.now)
		}
	}
	if err := m.readClaims(ctx, pc, accounts); err != nil {
		return leave(beforeWrite(err))
	}

	var writes eventstore.Batch
	hashes := resourceHashes{}
	for _, p := range batch {
		a := accounts[p.req.AccountID]
		if a == nil || a.head == nil {
			p.err = domain.ErrInvalidKey
			continue
		}
		if err := m.decide(p, a, keys[p.req.KeyID], hashes, &writes); err != nil {
			return leave(err)
		}
	}
	cut := func() { _ = pc.PgConn().Conn().Close() }
	if h := m.opts.Hooks.BeforeWrite; h != nil {
		h(txid, cut)
	}

	// Round trip 2: every write of the batch, then COMMIT.
	wb := &pgx.Batch{}
	if writes.Len() > 0 {
		wb.Queue(eventstore.WriteSQL, writes.WriteArgs()...)
		var ids []string
		var balances, charged, rc, rd, after []int64
		var days []*string
		for _, id := range accountIDs {
			if a := accounts[id]; a != nil && a.written {
				ids, balances = append(ids, id), append(balances, a.balance)
				charged, rc, rd = append(charged, a.t.charged), append(rc, a.t.requestsCharged), append(rd, a.t.requestsDeduplicated)
				var day *string
				if len(a.paid) > 0 && a.day != a.claimsDay {
					day = &a.day
				}
				days, after = append(days, day), append(after, a.from.Position)
			}
		}
		wb.Queue(updateAccountsSQL, ids, balances, charged, rc, rd, days, after)
	}
	chunkArgs, chunks := m.chunks(accountIDs, accounts)
	if chunks > 0 {
		wb.Queue(insertChunksSQL, chunkArgs...)
	}
	wb.Queue("COMMIT")
	pid := pc.PgConn().PID()
	wr := pc.SendBatch(ctx, wb)
	if h := m.opts.Hooks.AfterCommitSent; h != nil {
		h(txid, pid, cut)
	}
	err = readRound2(wr, writes.Len() > 0, chunks > 0)
	closeErr := wr.Close()
	if err == nil {
		// COMMIT's own answer was read and it said COMMIT: the batch is committed, whatever
		// closing the batch's results then says about the connection.
		if closeErr != nil {
			_ = pc.Close(ctx)
		}
		m.remember(accounts)
		return nil
	}
	if statementRolledBack(err) {
		// A statement of the batch failed with an ERROR: the server rolled the transaction
		// back and COMMIT answered ROLLBACK.
		return leave(eventstore.MapError(err))
	}
	// The connection failed, or the server ended the session (FATAL: shutdown, termination),
	// after COMMIT may have been sent: find out what happened.
	_ = pc.Close(ctx)
	if rerr := m.resolve(txid, pid); rerr != nil {
		return rerr
	}
	m.remember(accounts)
	return nil
}

// readClaims gives every account of the batch the claims it decides with (batchAccount.claims),
// holding the accounts' locks. Claims matter only for an account whose claims_day is the day it
// charges on. For those whose cached claims are not current through the head, one round trip
// reads what the cache lacks: for an entry of the same day behind the head (another process
// charged the account, or a batch's outcome was lost), the charges after it; for an account
// the meter holds nothing of (never charged here, or forgotten), the day's claim chunks and
// the charges after the last one (after claims_from if none). Nothing is read when every
// cache is current.
func (m *Meter) readClaims(ctx context.Context, pc *pgx.Conn, accounts map[string]*batchAccount) error {
	var nos []int32
	var afterPositions, afterVersions []int64
	var chunkDays []*string
	var coldNos []int32
	var coldDays []string
	stale := map[int32]*accountClaims{}
	for _, a := range accounts {
		if a.head == nil {
			continue
		}
		e, seen, current := m.claims.lookup(a.no, a.from.Version)
		switch {
		case current:
			a.claims = e
		case a.claimsDay != a.day:
			// No charge of the account is on its day yet: nothing to read.
		case e != nil && seen.day == a.claimsDay && seen.version < a.from.Version:
			stale[a.no] = e
			nos, afterPositions, afterVersions = append(nos, a.no), append(afterPositions, seen.position), append(afterVersions, seen.version)
			chunkDays = append(chunkDays, nil)
		default:
			stale[a.no] = nil
			nos, afterPositions, afterVersions = append(nos, a.no), append(afterPositions, a.claimsFrom-1), append(afterVersions, 0)
			chunkDays = append(chunkDays, &a.claimsDay)
			coldNos, coldDays = append(coldNos, a.no), append(coldDays, a.claimsDay)
		}
	}
	if len(nos) == 0 {
		return nil
	}
	if m.opts.OnClaimsRead != nil {
		m.opts.OnClaimsRead(len(nos)-len(coldNos), len(coldNos))
	}
	b := &pgx.Batch{}
	if len(coldNos) > 0 {
		b.Queue(claimChunksSQL, coldNos, coldDays)
	}
	b.Queue(claimEventsSQL, nos, afterPositions, afterVersions, chunkDays)
	br := pc.SendBatch(ctx, b)
	saved, read, err := readClaimRows(br, len(coldNos) > 0)
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	for _, a := range accounts {
		base, ok := stale[a.no]
		if !ok {
			continue
		}
		if base != nil {
			a.claims = m.claims.extend(a.no, base, a.from.Version, a.from.Position, read[a.no])
		} else {
			a.claims = m.claims.load(a.no, a.claimsDay, a.from.Version, a.from.Position, saved[a.no], read[a.no])
		}
	}
	return nil
}

// readClaimRows reads the claim chunks (when queued) and the charges readClaims asked for.
func readClaimRows(br pgx.BatchResults, chunks bool) (saved, read map[int32][]int64, err error) {
	saved, read = map[int32][]int64{}, map[int32][]int64{}
	var no int32
	var raw []byte
	if chunks {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, err
		}
		if _, err := pgx.ForEachRow(rows, []any{&no, &raw}, func() error {
			for i := 0; i+8 <= len(raw); i += 8 {
				saved[no] = append(saved[no], int64(binary.BigEndian.Uint64(raw[i:])))
			}
			return nil
		}); err != nil {
			return nil, nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	_, err = pgx.ForEachRow(rows, []any{&no, &raw}, func() error {
		f, err := domain.DecodeAccountFact(domain.EventRequestCharged, raw)
		if err != nil {
			return err
		}
		for _, r := range f.Paid {
			read[no] = append(read[no], ResourceHash(r))
		}
		return nil
	})
	return saved, read, err
}

// chunks are the claim chunks a batch saves: for each account it writes whose unsaved claims
// of the day reached claimChunkSize, those claims, covering its charges up to the head the
// batch read.
func (m *Meter) chunks(accountIDs []string, accounts map[string]*batchAccount) (args []any, n int) {
	var nos []int32
	var days []string
	var through, positions []int64
	var hashes [][]byte
	for _, id := range accountIDs {
		a := accounts[id]
		if a == nil || !a.written || a.claims == nil || a.claims.day != a.day {
			continue
		}
		c := m.claims.chunk(a.claims)
		if c == nil {
			continue
		}
		raw := make([]byte, 8*len(c))
		for i, h := range c {
			binary.BigEndian.PutUint64(raw[8*i:], uint64(h))
		}
		a.saved = len(c)
		nos, days, through, positions, hashes = append(nos, a.no), append(days, a.day), append(through, a.from.Version), append(positions, a.from.Position), append(hashes, raw)
	}
	return []any{nos, days, through, positions, hashes}, len(nos)
}

// remember tells the claim cache what a committed batch's charges paid for and saved.
func (m *Meter) remember(accounts map[string]*batchAccount) {
	for _, a := range accounts {
		if a.written {
			paid := make([]int64, 0, len(a.paid))
			for h := range a.paid {
				paid = append(paid, h)
			}
			m.claims.committed(a.no, a.claims, a.from.Version, a.head.Version, a.from.Position, a.day, paid, a.saved)
		}
	}
}

// readRound1 reads the locked accounts, key states, heads and transaction id.
func readRound1(br pgx.BatchResults, accounts map[string]*batchAccount, keys map[string]batchKey, txid *string) error {
	if _, err := br.Exec(); err != nil { // BEGIN
		return err
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	var a batchAccount
	if _, err := pgx.ForEachRow(rows, []any{&a.id, &a.no, &a.balance, &a.claimsDay, &a.claimsFrom}, func() error {
		acc := a
		accounts[a.id] = &acc
		return nil
	}); err != nil {
		return err
	}
	var keyID string
	var k batchKey
	rows, err = br.Query()
	if err != nil {
		return err
	}
	if _, err := pgx.ForEachRow(rows, []any{&keyID, &k.accountID, &k.state, &k.graceUntil}, func() error {
		keys[keyID] = k
		return nil
	}); err != nil {
		return err
	}
	heads, err := eventstore.ScanHeads(br.Query())
	if err != nil {
		return err
	}
	for _, a := range accounts {
		a.head = heads[a.no]
	}
	return br.QueryRow().Scan(txid)
}

// resourceHashes are a batch's resource hashes, each computed once: the decision and the
// claims it adds both key on it.
type resourceHashes map[string]int64

func (h resourceHashes) of(r string) int64 {
	v, ok := h[r]
	if !ok {
		v = ResourceHash(r)
		h[r] = v
	}
	return v
}

// readRound2 reads the outcome of a batch's writes and its COMMIT, in queue order.
func readRound2(wr pgx.BatchResults, events, chunks bool) error {
	n := 1 // COMMIT
	if chunks {
		n++
	}
	if events {
		n += 2
	}
	for range n {
		if _, err := wr.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// decide meters one charge of a locked account: it re-checks the key (a revoke that committed
// before the lock was taken is seen here, whatever the cache said), decides with the domain,
// and adds the event to the batch's writes. Refusals are the charge's own answer (p.err); an
// error is the batch's.
func (m *Meter) decide(p *pendingCharge, a *batchAccount, k batchKey, hashes resourceHashes, writes *eventstore.Batch) error {
	key := domain.Key{ID: p.req.KeyID, AccountID: k.accountID, State: k.state, GraceUntil: k.graceUntil}
	switch {
	case k.accountID != a.id:
		p.err = domain.ErrInvalidKey
	default:
		p.err = key.Authorize(a.now)
	}
	if p.err != nil {
		m.keys.Forget(a.id)
		return nil
	}
	p.res.Balance = a.balance
	if len(p.req.Resources) == 0 {
		p.res.Served = []bool{}
		return nil
	}
	d, err := domain.DecideCharge(p.req.Operation, p.req.Resources, a.balance, func(r string) bool {
		h := hashes.of(r)
		if _, ok := a.paid[h]; ok {
			return true
		}
		return m.claims.has(a.claims, a.day, h)
	})
	if err != nil {
		p.err = err
		return nil
	}
	a.balance -= d.Credits
	p.res = ChargeResult{ChargeDecision: d, Balance: a.balance}
	typ := domain.EventRequestCharged
	if len(d.Paid) == 0 {
		typ = domain.EventRequestDeduplicated
		a.t.requestsDeduplicated++
	} else {
		a.t.requestsCharged++
	}
	a.t.charged += d.Credits
	a.written = true
	for _, r := range d.Paid {
		if a.paid == nil {
			a.paid = map[int64]struct{}{}
		}
		a.paid[hashes.of(r)] = struct{}{}
	}
	_, err = writes.Add(a.head, a.now, eventstore.NewEvent{Type: typ, Payload: domain.RequestCharged{
		KeyNo: p.req.KeyNo, Operation: p.req.Operation, Paid: d.Paid, Deduplicated: d.Deduplicated,
		OmittedUnpaid: d.OmittedUnpaid, CreditsDelta: -d.Credits, BalanceAfter: a.balance}})
	return err
}

// outcomeWait bounds how long a lost commit's outcome is looked for before the answer says it
// is unknown.
const outcomeWait = 15 * time.Second

// resolve finds out whether the transaction txid, whose connection (backend pid) was lost
// after COMMIT may have been sent, committed: nil if it did, domain.ErrUnavailable if it was
// rolled back (nothing was charged), domain.ErrOutcomeUnknown if that cannot be found out in time. A backend still
// holding the transaction open (the COMMIT never arrived) is ended first, so the transaction
// cannot commit after the answer.
func (m *Meter) resolve(txid string, pid uint32) error {
	ctx, cancel := context.WithTimeout(context.Background(), outcomeWait)
	defer cancel()
	full, err := strconv.ParseUint(txid, 10, 64)
	if err != nil {
		return domain.ErrOutcomeUnknown
	}
	for {
		status, err := m.xactStatus(ctx, txid, strconv.FormatUint(full%(1<<32), 10), pid)
		switch {
		case err == nil && status == "committed":
			return nil
		case err == nil && status == "aborted":
			return domain.ErrUnavailable
		case err == nil && status == "":
			return domain.ErrOutcomeUnknown
		}
		select {
		case <-ctx.Done():
			return domain.ErrOutcomeUnknown
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (m *Meter) xactStatus(ctx context.Context, txid, xid32 string, pid uint32) (string, error) {
	c, err := m.store.Pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer c.Release()
	if _, err := c.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND backend_xid::text = $2`,
		int64(pid), xid32); err != nil {
		return "", err
	}
	var status *string
	if err := c.QueryRow(ctx, `SELECT pg_xact_status($1::text::xid8)`, txid).Scan(&status); err != nil {
		return "", err
	}
	if status == nil {
		return "", nil
	}
	if *status == "in progress" {
		return "", errors.New("still in progress")
	}
	return *status, nil
}
