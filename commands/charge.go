package commands

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// runBatch runs a batch and answers every charge in it: first, in one round trip, the charges
// of the accounts whose state the meter holds (commitFromMemory); then those of the others, and
// of any found changed meanwhile, from reads under the accounts' locks (commitUnderLock).
//
// The charges answered from memory are answered before the others are decided again: those
// may wait for an account's lock (MeterOptions.LockWait), and no other account's answer waits
// with them.
func (m *Meter) runBatch(batch []*pendingCharge) {
	slices.SortStableFunc(batch, func(a, b *pendingCharge) int { return strings.Compare(a.req.AccountID, b.req.AccountID) })
	defer m.noteHeld(batch)
	redo := m.commitFromMemory(batch)
	if m.opts.OnDecided != nil {
		m.opts.OnDecided(len(batch)-len(redo), len(redo))
	}
	if len(redo) > 0 && len(redo) < len(batch) {
		again := make(map[*pendingCharge]bool, len(redo))
		for _, p := range redo {
			again[p] = true
		}
		m.store.Appended()
		for _, p := range batch {
			if !again[p] {
				close(p.done)
			}
		}
		batch = redo
	}
	if len(redo) > 0 {
		m.runUnderLock(redo)
	}
	m.store.Appended()
	for _, p := range batch {
		close(p.done)
	}
}

// noteHeld records, once a batch is answered, the accounts whose row another transaction held
// past the wait (heldAccounts), and lets go of those that got their row: charged, or refused
// (a revoked or unknown key, too few credits) from a state kyapi_charge or the lock read.
func (m *Meter) noteHeld(batch []*pendingCharge) {
	now := time.Now()
	m.held.prune(now)
	for i, p := range batch {
		if i > 0 && p.req.AccountID == batch[i-1].req.AccountID {
			continue
		}
		switch {
		case isLockTimeout(p.err):
			m.held.mark(p.req.AccountID, now)
		case p.err == nil, errors.Is(p.err, domain.ErrInsufficientCredits),
			errors.Is(p.err, domain.ErrKeyRevoked), errors.Is(p.err, domain.ErrInvalidKey):
			m.held.clear(p.req.AccountID)
		}
	}
}

// runUnderLock runs charges under their accounts' locks: those of accounts whose row was held
// the last time (heldAccounts) apart, waiting for it only MeterOptions.HeldWait, the others
// waiting MeterOptions.LockWait.
func (m *Meter) runUnderLock(batch []*pendingCharge) {
	now := time.Now()
	var free, held []*pendingCharge
	for _, p := range batch {
		if m.held.is(p.req.AccountID, now) {
			held = append(held, p)
		} else {
			free = append(free, p)
		}
	}
	if len(free) > 0 {
		m.runUnderLockWaiting(free, m.opts.LockWait)
	}
	if len(held) > 0 {
		m.runUnderLockWaiting(held, m.opts.HeldWait)
	}
}

// runUnderLockWaiting runs charges through commitUnderLock, once more after a failure that a
// second try can get past, and each on its own when one statement failed for the whole batch.
func (m *Meter) runUnderLockWaiting(batch []*pendingCharge, wait time.Duration) {
	err := m.commitUnderLock(batch, wait)
	var stale *connectionLostBeforeWrite
	if eventstore.IsLockConflict(err) || errors.Is(err, eventstore.ErrNoPartition) || errors.As(err, &stale) {
		if errors.Is(err, eventstore.ErrNoPartition) {
			_, _ = eventstore.EnsurePartitions(context.Background(), m.store.Pool)
		}
		err = m.commitUnderLock(batch, wait)
	}
	if err != nil && len(batch) > 1 && statementFailed(err) {
		// The transaction was rolled back because a statement failed: find the account, then
		// the charge, that broke it, so that it fails alone. An account whose row another
		// transaction holds (lock_timeout) fails all its charges at once: each run on its own
		// would wait again, and every batch of the process with it.
		first := err
		lockHeld := isLockTimeout(err)
		err = nil
		for i := 0; i < len(batch); {
			j := i + 1
			for j < len(batch) && batch[j].req.AccountID == batch[i].req.AccountID {
				j++
			}
			group := batch[i:j]
			i = j
			if lockHeld && len(group) == len(batch) {
				// One account only: it is the one held.
				for _, p := range group {
					p.res, p.err = ChargeResult{}, first
				}
				continue
			}
			e := m.commitUnderLock(group, wait)
			if e == nil {
				continue
			}
			if isLockTimeout(e) || len(group) == 1 {
				for _, p := range group {
					p.res, p.err = ChargeResult{}, e
				}
				continue
			}
			for _, p := range group {
				if e := m.commitUnderLock([]*pendingCharge{p}, wait); e != nil {
					p.res, p.err = ChargeResult{}, e
				}
			}
		}
	}
	if err != nil {
		for _, p := range batch {
			p.res, p.err = ChargeResult{}, err
		}
	}
}

// batchAccount is an account of a batch as the batch moves it.
type batchAccount struct {
	id      string
	no      int32
	balance int64
	// claimsDay and claimsFrom are the account's claims_day (UTC day of its newest charge; ""
	// if never charged) and claims_from (position of its first charge of that day; only read
	// under the lock, 0 when decided from memory).
	claimsDay  string
	claimsFrom int64
	head       *eventstore.Head
	from       eventstore.Head // the head the decisions start from, before the batch's appends
	now        time.Time       // the batch's time, or the account's last event's if later
	day        string          // UTC day of now: the day its charges claim
	// claims are the account's claims the batch decides with, current through from.Version;
	// nil when the account has none on day.
	claims *accountClaims
	keys   map[string]batchKey // the states of the keys its charges use
	paid   map[int64]struct{}  // resources this batch's charges paid for (hashes)
	saved  int                 // claims of claims.unsaved the batch writes in a chunk
	t      totals
	// written: the batch appends to the account; stale: kyapi_charge found it changed and
	// wrote nothing of it.
	written, stale bool
}

type batchKey struct {
	accountID  string
	state      domain.KeyState
	graceUntil *time.Time
}

// startAt sets the time the account's charges are decided and recorded at: now, or the
// account's last event's time if that is later (within a stream time never goes back; another
// process's clock may be ahead of this one's), and the day they claim on.
func (a *batchAccount) startAt(now time.Time) {
	a.from = *a.head
	a.now = now
	if a.now.Before(a.head.At) {
		a.now = a.head.At
	}
	a.day = domain.Day(a.now)
}

// state is what the meter keeps of the account once the batch committed.
func (a *batchAccount) state() *accountState {
	s := &accountState{balance: a.balance, head: *a.head, claimsDay: a.claimsDay, keys: a.keys}
	if len(a.paid) > 0 {
		s.claimsDay = a.day
	}
	return s
}

// commitFromMemory decides, from the state the meter holds, the charges of every account whose
// state and dedup claims it holds current through the same head and whose keys it knows, and
// writes them in one round trip: BEGIN, kyapi_charge (which checks each account under its lock
// and writes those found as assumed), COMMIT. It returns the charges it did not answer: those
// of accounts it holds nothing of, or found changed, or all of them when the transaction
// failed before it could write.
func (m *Meter) commitFromMemory(batch []*pendingCharge) (redo []*pendingCharge) {
	// Not a request's context: a cancelled statement would break everyone's transaction.
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.BatchWait)
	defer cancel()
	now := m.clock().UTC().Truncate(time.Microsecond)
	m.claims.newDay(now)
	accounts := map[string]*batchAccount{}
	var ids []string
	var mine []*pendingCharge
	for i := 0; i < len(batch); {
		j := i + 1
		for j < len(batch) && batch[j].req.AccountID == batch[i].req.AccountID {
			j++
		}
		if a := m.fromMemory(batch[i:j], now); a != nil {
			accounts[a.id], ids, mine = a, append(ids, a.id), append(mine, batch[i:j]...)
		} else {
			redo = append(redo, batch[i:j]...)
		}
		i = j
	}
	if len(mine) == 0 {
		return redo
	}
	conn, err := m.store.Pool.Acquire(ctx)
	if err != nil {
		return batch
	}
	defer conn.Release()
	pc := conn.Conn()
	be, err := eventstore.BackendOf(ctx, pc)
	if err != nil {
		return batch
	}
	var writes eventstore.Batch
	hashes := resourceHashes{}
	for _, p := range mine {
		a := accounts[p.req.AccountID]
		if err := m.decide(p, a, a.keys[p.req.KeyID], hashes, &writes); err != nil {
			return batch
		}
	}
	if err := m.write(ctx, pc, be, "", mine, ids, accounts, &writes); err != nil {
		// Nothing was written: decide them all again under the lock.
		_ = leave(ctx, pc, err)
		m.states.forget(ids...)
		for _, p := range mine {
			p.res, p.err = ChargeResult{}, nil
		}
		return append(redo, mine...)
	}
	for _, p := range mine {
		if accounts[p.req.AccountID].stale {
			p.res, p.err = ChargeResult{}, nil
			redo = append(redo, p)
		}
	}
	return redo
}

// fromMemory is the account of charges (all of one account) as the meter's state says it is at
// now, or nil when the meter cannot decide them from memory: it holds no state of the account,
// or not the state of every key used, or not the account's dedup claims of the day through the
// same head.
func (m *Meter) fromMemory(charges []*pendingCharge, now time.Time) *batchAccount {
	req := charges[0].req
	s := m.states.get(req.AccountID)
	if s == nil {
		return nil
	}
	for _, p := range charges {
		if _, ok := s.keys[p.req.KeyID]; !ok {
			return nil
		}
	}
	head := s.head
	a := &batchAccount{id: req.AccountID, no: head.No, balance: s.balance, claimsDay: s.claimsDay, head: &head, keys: s.keys}
	a.startAt(now)
	e, _, current := m.claims.lookup(a.no, a.from.Version)
	switch {
	case current:
		a.claims = e
	case a.claimsDay != a.day:
		// No charge of the account is on its day yet: it has no claims to hold.
	default:
		return nil
	}
	return a
}

const (
	lockAccountsSQL = `SELECT account_id, stream_no, balance, coalesce(to_char(claims_day, 'YYYY-MM-DD'), ''), coalesce(claims_from, 0)
		FROM accounts WHERE account_id = ANY($1) ORDER BY account_id FOR UPDATE`
	keyStatesSQL = `SELECT key_id, account_id, state, grace_until FROM api_keys WHERE key_id = ANY($1)`
	// chargeSQL writes a batch (migration 0023): see kyapi_charge.
	chargeSQL = `SELECT stale, head_nos, head_positions FROM kyapi_charge($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
		$11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)`
)

// commitUnderLock decides a batch's charges from the accounts' state read under their locks and
// writes them: round trip 1 locks every account of the batch (in account-id order, so batches
// in any number of processes cannot deadlock) and then — in statements that start after the
// locks are held, so they see every commit before them — reads the keys' states and the
// accounts' stream heads; the dedup claims the meter lacks are read (readClaims); round trip 2
// is kyapi_charge and COMMIT. It sets each charge's answer; an error is the batch's: nothing of
// it was written, or — domain.ErrOutcomeUnknown — it cannot be known whether it was.
func (m *Meter) commitUnderLock(batch []*pendingCharge, lockWait time.Duration) error {
	// Not a request's context: a cancelled statement would break everyone's transaction.
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.BatchWait)
	defer cancel()
	for _, p := range batch {
		p.res, p.err = ChargeResult{}, nil
	}
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
	be, err := eventstore.BackendOf(ctx, pc)
	if err != nil {
		return beforeWrite(err)
	}
	rb := &pgx.Batch{}
	rb.Queue("BEGIN")
	rb.Queue(fmt.Sprintf("SET LOCAL lock_timeout = %d", max(lockWait.Milliseconds(), 1))) // 0 would be none
	rb.Queue(lockAccountsSQL, accountIDs)
	rb.Queue(keyStatesSQL, keyIDs)
	rb.Queue(eventstore.HeadsByNoSQL, nos)
	// The transaction's id (the locks gave it one): should the connection be lost after the
	// writes were sent, its status tells whether they committed (resolve).
	rb.Queue(`SELECT pg_current_xact_id()::text`)
	accounts := map[string]*batchAccount{}
	br := pc.SendBatch(ctx, rb)
	var xid string
	err = readRound1(br, accounts)
	if err == nil {
		err = br.QueryRow().Scan(&xid)
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return m.leaveLost(ctx, pc, be, beforeWrite(err))
	}
	// The charges' time is read once the locks are held: a revoke, a grace period ending,
	// midnight are seen as of then.
	now := m.clock().UTC().Truncate(time.Microsecond)
	m.claims.newDay(now)
	for _, a := range accounts {
		if a.head != nil {
			a.startAt(now)
			// The states of other keys the meter holds are still current if the head has not
			// moved since (kyapi_charge checks them too): kept, a charge by any of the
			// account's keys in use can be decided from memory next time.
			if s := m.states.get(a.id); s != nil && s.head.Version == a.from.Version {
				for id, k := range s.keys {
					if _, ok := a.keys[id]; !ok {
						a.keys[id] = k
					}
				}
			}
		}
	}
	if err := m.readClaims(ctx, pc, accounts); err != nil {
		return m.leaveLost(ctx, pc, be, beforeWrite(err))
	}

	var writes eventstore.Batch
	hashes := resourceHashes{}
	var ids []string
	for _, p := range batch {
		a := accounts[p.req.AccountID]
		if a == nil || a.head == nil {
			p.err = domain.ErrInvalidKey
			continue
		}
		if len(ids) == 0 || ids[len(ids)-1] != a.id {
			ids = append(ids, a.id)
		}
		if err := m.decide(p, a, a.keys[p.req.KeyID], hashes, &writes); err != nil {
			return leave(ctx, pc, err)
		}
	}
	if err := m.write(ctx, pc, be, xid, batch, ids, accounts, &writes); err != nil {
		return leave(ctx, pc, eventstore.MapError(err))
	}
	// Under the lock nothing can change an account behind the batch's back but something that
	// appends to its stream without the account's lock.
	for _, p := range batch {
		if a := accounts[p.req.AccountID]; a != nil && a.stale {
			p.res, p.err = ChargeResult{}, eventstore.ErrVersionConflict
		}
	}
	return nil
}

// write sends the batch's writes and COMMIT (after BEGIN when the batch was decided from
// memory) in one round trip, and reads what happened. On success, the accounts kyapi_charge
// found changed are marked stale (nothing of them was written), the others' new state is kept,
// and the claim cache learns what their charges paid for. It returns an error only when
// nothing was written: the server answered an error (statementRolledBack), or — decided from
// memory — nothing could be sent (connectionLostBeforeWrite).
//
// Any other failure comes after the writes may have been sent: write finds out which accounts'
// events are in the store (resolve) and settles the answers. A committed account's answers
// stand. Otherwise, decided from memory, its charges are marked stale (the caller decides them
// again under the lock: nothing of them was written, and the lost transaction can no longer
// commit); decided under the lock, a refusal stands and a charge fails as unavailable. If that
// cannot be found out in time, the charges that wrote fail with domain.ErrOutcomeUnknown.
//
// xid is the transaction's id when the batch was decided under the lock (read with the locks);
// "" when decided from memory, where BEGIN is sent with the writes.
func (m *Meter) write(ctx context.Context, pc *pgx.Conn, be eventstore.Backend, xid string, charges []*pendingCharge,
	ids []string, accounts map[string]*batchAccount, writes *eventstore.Batch) error {
	fromMemory := xid == ""
	cut := func() { _ = pc.PgConn().Conn().Close() }
	if h := m.opts.Hooks.BeforeWrite; h != nil {
		h(cut)
	}
	wb := &pgx.Batch{}
	if fromMemory {
		wb.Queue("BEGIN")
	}
	wb.Queue(chargeSQL, m.chargeArgs(ids, accounts, writes)...)
	wb.Queue("COMMIT")
	wr := pc.SendBatch(ctx, wb)
	if h := m.opts.Hooks.AfterCommitSent; h != nil {
		h(be.PID, cut)
	}
	var stale, headNos []int32
	var headPositions []int64
	err := func() error {
		if fromMemory {
			if _, err := wr.Exec(); err != nil {
				return err
			}
		}
		if err := wr.QueryRow().Scan(&stale, &headNos, &headPositions); err != nil {
			return err
		}
		_, err := wr.Exec() // COMMIT
		return err
	}()
	closeErr := wr.Close()
	switch {
	case err == nil:
		// COMMIT's own answer was read and it said COMMIT: the batch is committed, whatever
		// closing the batch's results then says about the connection.
		if closeErr != nil {
			_ = pc.Close(ctx)
		}
		m.committed(ids, accounts, stale, headNos, headPositions)
		return nil
	case statementRolledBack(err):
		// A statement failed with an ERROR: the server rolled the transaction back.
		return err
	case fromMemory && pgconn.SafeToRetry(err):
		// Nothing reached the server (a pooled connection that had died): no transaction
		// was even begun.
		_ = pc.Close(ctx)
		return &connectionLostBeforeWrite{err}
	}
	// The connection failed, or the server ended the session (FATAL: shutdown, termination),
	// after the writes may have been sent: find out what happened.
	_ = pc.Close(ctx)
	m.states.forget(ids...)
	written, rerr := m.resolve(be, xid, ids, accounts, writes)
	for _, id := range ids {
		if a := accounts[id]; a.written && rerr == nil && written[a.no] {
			// Decided from memory, found by its events' content, not by its transaction:
			// what was found may be another process's identical events
			// (eventstore.Batch.Written), written without this batch's claim chunk. Its
			// claims are kept unsaved, for the next chunk to save (a claim saved twice is
			// harmless), so that no chunk's `through` covers a claim no chunk holds.
			if fromMemory {
				a.saved = 0
			}
			m.remember(a)
		}
	}
	for _, p := range charges {
		a := accounts[p.req.AccountID]
		switch {
		case a == nil:
		case fromMemory && !(a.written && (rerr != nil || written[a.no])):
			a.stale = true
		case a.written && (rerr != nil || !written[a.no]) && refusedAfterSpending(p.err, a):
			// Refused against a balance the account's earlier charges in the batch had spent,
			// and they were not (or may not have been) written. Not written, the account holds
			// what the batch found: the refusal stands, at that balance, if that balance does
			// not cover the operation either; otherwise, as when it is not known what was
			// written, neither the refusal nor a balance can be told. Nothing was charged.
			if found := a.balance + a.t.charged; rerr == nil && found < p.req.Operation.Cost() {
				p.res, p.err = ChargeResult{Balance: found}, &domain.InsufficientCreditsError{Balance: found}
			} else {
				p.res, p.err = ChargeResult{}, domain.ErrUnavailable
			}
		case fromMemory && rerr != nil && errors.Is(p.err, domain.ErrInsufficientCredits):
			// Refused at the balance the meter held, which kyapi_charge checks at the commit: it
			// may have been behind (credits bought through another process), and it is not known
			// whether the commit found it so. Nothing was charged. (A revoke is never undone: a
			// key the meter holds revoked was revoked, and that refusal stands.)
			p.res, p.err = ChargeResult{}, domain.ErrUnavailable
		case p.err != nil:
			// A refusal (402, a key revoked) wrote nothing and stands, whatever became of the
			// account's other charges.
		case a.written && rerr != nil:
			p.res, p.err = ChargeResult{}, rerr
		case a.written && written[a.no]:
		case a.written:
			p.res, p.err = ChargeResult{}, domain.ErrUnavailable
		}
	}
	return nil
}

// refusedAfterSpending tells a 402 decided at a balance below the one the batch found the
// account at: the batch's earlier charges of the account had spent the difference.
func refusedAfterSpending(err error, a *batchAccount) bool {
	var ic *domain.InsufficientCreditsError
	return errors.As(err, &ic) && ic.Balance != a.balance+a.t.charged
}

// committed records a committed batch: the accounts kyapi_charge found changed are marked stale;
// the others' heads take the positions it returned, their state is kept and their claims
// remembered.
func (m *Meter) committed(ids []string, accounts map[string]*batchAccount, stale, headNos []int32, headPositions []int64) {
	positions := make(map[int32]int64, len(headNos))
	for i, no := range headNos {
		positions[no] = headPositions[i]
	}
	for _, id := range ids {
		a := accounts[id]
		if slices.Contains(stale, a.no) {
			a.written, a.stale = false, true
			m.states.forget(id)
			continue
		}
		if a.written {
			a.head.Position = positions[a.no]
			m.remember(a)
		}
		m.states.put(id, a.state())
	}
}

// chargeArgs are kyapi_charge's arguments for the batch: every account with the head version
// its decisions started from, every key used as they took it, the accounts' new balances and
// totals, the claim chunks due, and the events.
func (m *Meter) chargeArgs(ids []string, accounts map[string]*batchAccount, writes *eventstore.Batch) []any {
	var nos, kNos, wNos []int32
	var versions, wBalances, wCharged, wRC, wRD []int64
	var kIDs, kStates []string
	var kGraces []*time.Time
	var wDays []*string
	for _, id := range ids {
		a := accounts[id]
		nos, versions = append(nos, a.no), append(versions, a.from.Version)
		for keyID, k := range a.keys {
			if k.accountID == a.id {
				kIDs, kNos, kStates, kGraces = append(kIDs, keyID), append(kNos, a.no), append(kStates, string(k.state)), append(kGraces, k.graceUntil)
			}
		}
		if a.written {
			var day *string
			if len(a.paid) > 0 && a.day != a.claimsDay {
				day = &a.day
			}
			wNos, wBalances = append(wNos, a.no), append(wBalances, a.balance)
			wCharged, wRC, wRD = append(wCharged, a.t.charged), append(wRC, a.t.requestsCharged), append(wRD, a.t.requestsDeduplicated)
			wDays = append(wDays, day)
		}
	}
	args := []any{nos, versions, kIDs, kNos, kStates, kGraces, wNos, wBalances, wCharged, wRC, wRD, wDays}
	args = append(args, m.chunks(ids, accounts)...)
	return append(args, writes.EventArgs()...)
}

// leave rolls back whatever transaction is open on pc (a broken connection is discarded) and
// returns err.
func leave(ctx context.Context, pc *pgx.Conn, err error) error {
	if pc.PgConn().TxStatus() != 'I' {
		if _, rbErr := pc.Exec(ctx, "ROLLBACK"); rbErr != nil {
			_ = pc.Close(ctx)
		}
	}
	return err
}

// leaveLost is leave for a batch that failed before its writes were sent. When its connection
// was lost rather than a statement refused, its backend may still run, holding the accounts'
// locks inside its transaction until the server notices the connection is gone (a network
// partition: hours); it is ended, so that the accounts' next batches do not wait for it.
func (m *Meter) leaveLost(ctx context.Context, pc *pgx.Conn, be eventstore.Backend, err error) error {
	err = leave(ctx, pc, err)
	if !pc.IsClosed() {
		return err
	}
	end, cancel := context.WithTimeout(context.Background(), outcomeWait)
	defer cancel()
	if c, cerr := eventstore.FreshConn(end, m.store.Pool); cerr == nil {
		_, _ = be.End(end, c)
		_ = c.Close(end)
	}
	return err
}

// readRound1 reads the locked accounts, the key states and the heads.
func readRound1(br pgx.BatchResults, accounts map[string]*batchAccount) error {
	for range 2 { // BEGIN, SET LOCAL lock_timeout
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	var a batchAccount
	if _, err := pgx.ForEachRow(rows, []any{&a.id, &a.no, &a.balance, &a.claimsDay, &a.claimsFrom}, func() error {
		acc := a
		acc.keys = map[string]batchKey{}
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
		if a := accounts[k.accountID]; a != nil {
			a.keys[keyID] = k
		}
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
	return nil
}

// resourceHashes are a batch's resource hashes, each computed once: the decision and the
// claims it adds both key on it.
type resourceHashes map[string]int64

func (h resourceHashes) of(r string) int64 {
	v, ok := h[r]
	if !ok {
		v = domain.ResourceHash(r)
		h[r] = v
	}
	return v
}

// decide meters one charge of an account (locked, or as the meter holds it: kyapi_charge checks
// it under the lock before anything decided here is written): it checks the key (one of the
// account's, authorized at the charge's time), decides with the domain, and adds the event to
// the batch's writes. Refusals are the charge's own answer (p.err); an error is the batch's.
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
	if errors.Is(err, domain.ErrInsufficientCredits) {
		p.err = &domain.InsufficientCreditsError{Balance: a.balance}
		return nil
	}
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

// isLockTimeout tells a statement that waited for a lock longer than lock_timeout (55P03).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// statementFailed tells an error after which the database rolled the transaction back
// because one of its statements failed.
func statementFailed(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || errors.Is(err, eventstore.ErrVersionConflict)
}

// connectionLostBeforeWrite is a batch whose connection failed before any write was sent:
// nothing of it was written, and runUnderLock tries it once more on another connection.
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

// lockWait is MeterOptions.LockWait's default. Well below batchWait: an account held by
// another transaction ends its batch in a known rollback (SQLSTATE 55P03, nothing charged)
// rather than the batch being taken for lost and its outcome looked for under locks that
// transaction still holds, which would make every account of the batch charge_outcome_unknown.
const lockWait = 2 * time.Second

// outcomeWait bounds how long a lost commit's outcome is looked for before the answer says it
// is unknown. A variable for the tests.
var outcomeWait = 15 * time.Second

// batchWait bounds a batch's round trips (a connection from the pool, the locks, the reads,
// the writes and COMMIT). A connection that stops answering without closing — a network
// partition, a failover that leaves the old socket open — is taken for lost once it has
// passed, and the batch goes the way of any lost connection: nothing charged if the writes were
// not sent, else its outcome found out (resolve). A batch that legitimately waits this long
// for its accounts' locks is treated the same.
const batchWait = 10 * time.Second

// resolve finds out, for a batch whose connection to backend be was lost after its writes may
// have been sent, which accounts' events are in the store. It first makes sure the transaction
// can no longer commit: it ends the backend if it still runs (the COMMIT may never have
// arrived, or be on its way) and waits until it is gone. Then, when the batch's transaction id
// xid is known (decided under the lock), its status says whether it committed: another
// process charging the same from the same head, at the same recorded time, writes events
// identical to the batch's, which their content cannot tell from the batch's own. Committed,
// or decided from memory ("": BEGIN went with the writes), holding the accounts' locks (so
// that no transaction that held them is still running), it reads whether each account's
// events of the batch are all there (eventstore.Batch.Written). domain.ErrOutcomeUnknown if
// that cannot be found out in time.
func (m *Meter) resolve(be eventstore.Backend, xid string, ids []string, accounts map[string]*batchAccount, writes *eventstore.Batch) (map[int32]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), outcomeWait)
	defer cancel()
	var written []string
	for _, id := range ids {
		if accounts[id].written {
			written = append(written, id)
		}
	}
	if len(written) == 0 {
		return map[int32]bool{}, nil
	}
	for {
		out, err := m.writtenAfter(ctx, be, xid, written, accounts, writes)
		if err == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, domain.ErrOutcomeUnknown
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errBackendRunning: the lost transaction's backend has not ended yet.
var errBackendRunning = errors.New("commands: the backend of a lost batch still runs")

func (m *Meter) writtenAfter(ctx context.Context, be eventstore.Backend, xid string, ids []string, accounts map[string]*batchAccount,
	writes *eventstore.Batch) (map[int32]bool, error) {
	// Each try on a new connection, given a part of the time, so that one that stops
	// answering leaves time for the next.
	ctx, cancel := context.WithTimeout(ctx, outcomeWait/5)
	defer cancel()
	c, err := eventstore.FreshConn(ctx, m.store.Pool)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close(ctx) }()
	running, err := be.End(ctx, c)
	if err != nil {
		return nil, err
	}
	if running {
		return nil, errBackendRunning
	}
	if xid != "" {
		// Its transaction's status says whether it wrote anything: rolled back, nothing, however
		// like the batch's the events found (another process's identical ones). Committed, each
		// account's events are looked for below: kyapi_charge writes nothing of an account it
		// finds changed (a stream appended to without the account's lock).
		var status *string
		if err := c.QueryRow(ctx, `SELECT pg_xact_status($1::xid8)`, xid).Scan(&status); err != nil {
			return nil, err
		}
		if status == nil || *status == "in progress" {
			return nil, errBackendRunning
		}
		if *status != "committed" {
			out := map[int32]bool{}
			for _, id := range ids {
				out[accounts[id].no] = false
			}
			return out, nil
		}
	}
	var out map[int32]bool
	err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE account_id = ANY($1) ORDER BY account_id FOR UPDATE`, ids); err != nil {
			return err
		}
		out, err = writes.Written(ctx, tx)
		return err
	})
	return out, err
}
