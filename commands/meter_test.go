package commands_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// gatedStack is a stack whose meter has one worker and holds its first batch at a gate, so
// that every charge submitted meanwhile joins the second batch.
type gatedStack struct {
	stack
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	sizes   []int
}

func newGatedStack(t *testing.T, clk *clock, hooks commands.MeterHooks) *gatedStack {
	gs := &gatedStack{entered: make(chan struct{}), release: make(chan struct{})}
	gs.stack = newStack(t, pgtest.NewDatabase(t), clk, commands.MeterOptions{Workers: 1, Hooks: hooks,
		BeforeBatch: func(n int) {
			gs.mu.Lock()
			gs.sizes = append(gs.sizes, n)
			first := len(gs.sizes) == 1
			gs.mu.Unlock()
			if first {
				close(gs.entered)
				<-gs.release
			}
		}})
	return gs
}

type outcome struct {
	res commands.ChargeResult
	err error
}

// chargeReq is a charge by key, authenticated when it is sent.
type chargeReq struct {
	hash      domain.KeyHash
	op        domain.Operation
	resources []string
}

// oneBatch charges reqs in one batch: a charge that changes nothing holds the worker at the
// gate while they queue up.
func (gs *gatedStack) oneBatch(t *testing.T, holder domain.KeyHash, reqs []chargeReq) []outcome {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := gs.charge(holder, domain.OpPlaceList); err != nil {
			t.Error(err)
		}
	}()
	<-gs.entered
	// One at a time, so that they queue in the order given.
	out := make([]outcome, len(reqs))
	for i, r := range reqs {
		c, err := gs.meter.Authenticate(ctx, r.hash)
		if err != nil {
			out[i].err = err
			continue
		}
		wg.Add(1)
		queued := gs.meter.Pending()
		go func() {
			defer wg.Done()
			out[i].res, out[i].err = gs.meter.Charge(ctx, commands.ChargeRequest{Caller: c, Operation: r.op, Resources: r.resources})
		}()
		for deadline := time.Now().Add(10 * time.Second); gs.meter.Pending() <= queued; time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("charge %d never queued", i)
			}
		}
	}
	close(gs.release)
	wg.Wait()
	return out
}

func (gs *gatedStack) batchSizes() []int {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return append([]int(nil), gs.sizes...)
}

func TestTwoMetersCharging200TimesAt5CreditsInBatchesSpendExactly500(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	a := newStack(t, dbURL, clk, commands.MeterOptions{Workers: 4, MaxBatch: 16})
	b := newStack(t, dbURL, clk, commands.MeterOptions{Workers: 4, MaxBatch: 16})
	accountID := race200ChargesOn500Credits(t, a, b)
	if l := ledgerOf(t, a, accountID); l.balance != 0 || !l.consistent() || l.charges != 101 {
		t.Fatalf("ledger %+v; want balance 0 matching its events, 101 charges (with the spend-down)", l)
	}
	auditClean(t, a.pool)
}

func TestARefusedChargeInABatchFailsAloneAndTheOthersCommit(t *testing.T) {
	gs := newGatedStack(t, &clock{now: noon}, commands.MeterHooks{})
	rich, richKey := fundedAccount(t, gs.stack, 500) // 1,000 credits
	poor, poorKey := fundedAccount(t, gs.stack, 0)
	revoked, revokedKey := fundedAccount(t, gs.stack, 500)
	richHash, revokedHash := domain.HashKey(richKey.APIKey), domain.HashKey(revokedKey.APIKey)
	// The revoked key is authenticated (and cached) before the revoke: only the charge's
	// re-check under the lock can refuse it.
	revokedCaller, err := gs.meter.Authenticate(ctx, revokedHash)
	if err != nil {
		t.Fatal(err)
	}
	if err := gs.accounts.RevokeKey(ctx, revoked, revokedKey.KeyID, "", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	detail := func(hash domain.KeyHash, place string) chargeReq {
		return chargeReq{hash, domain.OpPlaceDetail, []string{domain.PlaceResource(place)}}
	}
	long := strings.Repeat("x", 5000) // a resource identity far over PostgreSQL's index row limit
	reqs := []chargeReq{
		detail(richHash, "p1"),
		{domain.HashKey(poorKey.APIKey), domain.OpTowns, []string{domain.TownsResource}},
		detail(richHash, "p2"),
		detail(richHash, long),
		detail(richHash, "bad\x00name"),
		detail(richHash, "p3"),
	}
	out := gs.oneBatch(t, richHash, reqs)
	var revokedOut outcome
	revokedOut.res, revokedOut.err = gs.meter.Charge(ctx, commands.ChargeRequest{Caller: revokedCaller, Operation: domain.OpPlaceDetail,
		Resources: []string{domain.PlaceResource("p1")}})

	for i, want := range []error{nil, domain.ErrInsufficientCredits, nil, nil, nil, nil} {
		if !errors.Is(out[i].err, want) {
			t.Errorf("charge %d: %v; want %v", i, out[i].err, want)
		}
	}
	if !errors.Is(revokedOut.err, domain.ErrKeyRevoked) {
		t.Errorf("charge with the revoked key: %v", revokedOut.err)
	}
	if sizes := gs.batchSizes(); len(sizes) < 2 || sizes[1] != len(reqs) {
		t.Fatalf("batch sizes %v; want the %d charges in one batch", sizes, len(reqs))
	}
	balances := []int64{out[0].res.Balance, out[2].res.Balance, out[3].res.Balance, out[4].res.Balance, out[5].res.Balance}
	if fmt.Sprint(balances) != "[999 998 997 996 995]" {
		t.Fatalf("balances after the paid details %v; want [999 998 997 996 995]", balances)
	}
	if l := ledgerOf(t, gs.stack, rich); l.balance != 995 || !l.consistent() {
		t.Fatalf("rich account %+v; want balance 995 matching its events", l)
	}
	if l := ledgerOf(t, gs.stack, poor); l.balance != 0 || l.deltas != 0 {
		t.Fatalf("poor account %+v; want nothing charged", l)
	}
	if l := ledgerOf(t, gs.stack, revoked); l.balance != 1000 || !l.consistent() {
		t.Fatalf("revoked account %+v; want nothing charged", l)
	}
	// The long identity is claimed like any other: again today it is free.
	if res, err := gs.charge(richHash, domain.OpPlaceDetail, domain.PlaceResource(long)); err != nil || !res.FullyDeduplicated() {
		t.Fatalf("the long resource again: %+v %v", res, err)
	}
	auditClean(t, gs.pool)
}

func TestTheSameResourceTwiceInOneBatchIsChargedOnce(t *testing.T) {
	gs := newGatedStack(t, &clock{now: noon}, commands.MeterHooks{})
	accountID, key := fundedAccount(t, gs.stack, 500)
	hash := domain.HashKey(key.APIKey)
	p1 := domain.PlaceResource("p1")
	reqs := []chargeReq{
		{hash, domain.OpPlaceDetail, []string{p1}},
		{hash, domain.OpPlaceDetail, []string{p1}},
		{hash, domain.OpPlaceList, []string{p1, domain.PlaceResource("p2")}},
	}
	out := gs.oneBatch(t, hash, reqs)
	for i, o := range out {
		if o.err != nil {
			t.Fatalf("charge %d: %v", i, o.err)
		}
	}
	first, again, list := out[0].res, out[1].res, out[2].res
	if first.Credits != 1 || again.Credits != 0 || !again.FullyDeduplicated() || list.Credits != 1 || len(list.Deduplicated) != 1 {
		t.Fatalf("first %+v, again %+v, list %+v; want p1 paid once, then free, and only p2 paid by the list", first, again, list)
	}
	if l := ledgerOf(t, gs.stack, accountID); l.balance != 998 || !l.consistent() {
		t.Fatalf("ledger %+v; want balance 998 matching its events", l)
	}
}

func TestTwoMetersChargingSeveralAccountsInMixedOrderNeverDeadlock(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	a := newStack(t, dbURL, clk, commands.MeterOptions{MaxBatch: 16, Workers: 3})
	b := newStack(t, dbURL, clk, commands.MeterOptions{MaxBatch: 16, Workers: 3})
	single := newStack(t, dbURL, clk, commands.MeterOptions{MaxBatch: 1, Workers: 4})
	const accounts, charges = 8, 600
	ids := make([]string, accounts)
	hashes := make([]domain.KeyHash, accounts)
	for i := range ids {
		id, key := fundedAccount(t, a, 500)
		ids[i], hashes[i] = id, domain.HashKey(key.APIKey)
	}
	var wg sync.WaitGroup
	for i := 0; i < charges; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := []stack{a, b, single}[i%3]
			// Each process sees the accounts in a different order.
			acc := (i * 5) % accounts
			if i%2 == 1 {
				acc = accounts - 1 - acc
			}
			if _, err := s.charge(hashes[acc], domain.OpPlaceList, domain.PlaceResource(fmt.Sprint("a", i)), domain.PlaceResource(fmt.Sprint("b", i))); err != nil {
				t.Error(err)
			}
		}(i)
		if i == charges/2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := a.accounts.GrantBonus(ctx, "outage-1", 7, "mid-run", eventstore.Metadata{}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	var total int64
	for _, id := range ids {
		l := ledgerOf(t, a, id)
		if !l.consistent() {
			t.Errorf("account %s: %+v; want the write model to match its events", id, l)
		}
		total += l.balance
	}
	if want := int64(accounts*(1000+7) - charges*2); total != want {
		t.Fatalf("total balance %d; want %d", total, want)
	}
	auditClean(t, a.pool)
}

// A stream head that moved between the batch's reads and its writes (something appended to
// the account without its lock) makes the append statement raise: the claim, the event and the
// debit are all rolled back, and only that account's charge fails.
func TestAHeadMovedBehindTheMetersBackFailsTheChargeWithNothingWritten(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprint("batched=", batched), func(t *testing.T) {
			var target atomic.Int32 // the stream whose head the hook moves
			var moved atomic.Int64
			var gs *gatedStack
			hook := func(func()) {
				if no := target.Load(); no != 0 {
					if _, err := gs.pool.Exec(ctx, `UPDATE streams SET version = version + 1 WHERE stream_no = $1`, no); err != nil {
						t.Error(err)
					}
					moved.Add(1)
				}
			}
			gs = newGatedStack(t, &clock{now: noon}, commands.MeterHooks{BeforeWrite: hook})
			victim, vkey := fundedAccount(t, gs.stack, 500)
			other, okey := fundedAccount(t, gs.stack, 500)
			vhash, ohash := domain.HashKey(vkey.APIKey), domain.HashKey(okey.APIKey)
			vc, err := gs.meter.Authenticate(ctx, vhash)
			if err != nil {
				t.Fatal(err)
			}
			target.Store(vc.StreamNo)
			var out []outcome
			if batched {
				out = gs.oneBatch(t, ohash, []chargeReq{
					{vhash, domain.OpPlaceDetail, []string{domain.PlaceResource("p1")}},
					{ohash, domain.OpPlaceDetail, []string{domain.PlaceResource("p1")}},
				})
			} else {
				close(gs.release)
				var o outcome
				o.res, o.err = gs.charge(vhash, domain.OpPlaceDetail, domain.PlaceResource("p1"))
				out = append(out, o)
			}
			target.Store(0)
			// Put the head back where its events are, as an operator would.
			if _, err := gs.pool.Exec(ctx, `UPDATE streams SET version = version - $2 WHERE stream_no = $1`, vc.StreamNo, moved.Load()); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(out[0].err, eventstore.ErrVersionConflict) {
				t.Fatalf("victim's charge: %+v %v; want a version conflict", out[0].res, out[0].err)
			}
			if batched && (out[1].err != nil || out[1].res.Credits != 1) {
				t.Fatalf("neighbour's charge: %+v %v; want it charged", out[1].res, out[1].err)
			}
			if l := ledgerOf(t, gs.stack, victim); l.balance != 1000 || !l.consistent() || l.charges != 0 {
				t.Fatalf("victim %+v; want nothing debited", l)
			}
			var claimsDay *string
			if err := gs.pool.QueryRow(ctx, `SELECT claims_day::text FROM accounts WHERE stream_no = $1`, vc.StreamNo).Scan(&claimsDay); err != nil || claimsDay != nil {
				t.Fatalf("the failed charge left claims_day %v (%v); want none", claimsDay, err)
			}
			if l := ledgerOf(t, gs.stack, other); !l.consistent() {
				t.Fatalf("neighbour %+v", l)
			}
			// Nothing of the failed charge is claimed, in the database or in the meter's memory.
			if res, err := gs.charge(vhash, domain.OpPlaceDetail, domain.PlaceResource("p1")); err != nil || res.Credits != 1 {
				t.Fatalf("p1 again after the failed charge: %+v %v; want it paid", res, err)
			}
			auditClean(t, gs.pool)
		})
	}
}

// The connection is lost after COMMIT was sent. If the transaction committed, the paid answer
// is served; if it did not (the connection was lost before COMMIT got through), the answer is
// "unavailable" and nothing was charged. Either way, what is answered is what happened.
func TestALostCommitIsFoundOutBeforeAnswering(t *testing.T) {
	type mode int
	const (
		afterCommit mode = iota
		beforeCommit
	)
	for _, m := range []mode{afterCommit, beforeCommit} {
		t.Run(map[mode]string{afterCommit: "committed", beforeCommit: "rolled back"}[m], func(t *testing.T) {
			dbURL := pgtest.NewDatabase(t)
			var armed atomic.Bool
			var probe stack
			var id string
			hooks := commands.MeterHooks{
				BeforeWrite: func(cut func()) {
					if m == beforeCommit && armed.CompareAndSwap(true, false) {
						cut()
					}
				},
				AfterCommitSent: func(_ uint32, cut func()) {
					if m != afterCommit || !armed.CompareAndSwap(true, false) {
						return
					}
					// Wait until the commit has happened, then lose the answer to it.
					waitForBalance(t, probe, id, 999)
					cut()
				},
			}
			s := newStack(t, dbURL, &clock{now: noon}, commands.MeterOptions{Hooks: hooks})
			probe = newStack(t, dbURL, &clock{now: noon})
			var key commands.IssuedKey
			id, key = fundedAccount(t, s, 500)
			hash := domain.HashKey(key.APIKey)
			armed.Store(true)
			res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p1"))
			l := ledgerOf(t, s, id)
			switch m {
			case afterCommit:
				if err != nil || res.Credits != 1 || res.Balance != 999 || l.balance != 999 || l.charges != 1 {
					t.Fatalf("answer %+v %v, ledger %+v; want the paid answer of the charge that committed", res, err, l)
				}
			case beforeCommit:
				if !errors.Is(err, domain.ErrUnavailable) || l.balance != 1000 || l.charges != 0 {
					t.Fatalf("answer %+v %v, ledger %+v; want unavailable and nothing charged", res, err, l)
				}
			}
			if !l.consistent() {
				t.Fatalf("ledger %+v", l)
			}
			// The meter goes on with a fresh connection, and knows whether p1 was paid.
			if res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p2")); err != nil || res.Credits != 1 {
				t.Fatalf("next charge: %+v %v", res, err)
			}
			res, err = s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p1"))
			if want := map[mode]int64{afterCommit: 0, beforeCommit: 1}[m]; err != nil || res.Credits != want {
				t.Fatalf("p1 again: %+v %v; want %d credits", res, err, want)
			}
			auditClean(t, s.pool)
		})
	}
}

// The server ending the session (as pg_ctl stop -m fast or an operator's pg_terminate_backend
// does) at any moment after COMMIT was sent never makes the answer lie: a paid answer means the
// charge is in the ledger, "unavailable" means it is not, and only "outcome unknown" may leave
// the client unsure. Where the termination lands varies from run to run (before COMMIT, after
// it, or between its answer and the end of the exchange), so the test repeats it.
func TestAServerEndingTheSessionAfterCommitNeverMakesTheAnswerLie(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	var probe stack
	var armed, afterCommit atomic.Bool
	var id string
	var balance int64 // the balance the armed charge leaves if it commits
	s := newStack(t, dbURL, &clock{now: noon}, commands.MeterOptions{Hooks: commands.MeterHooks{
		AfterCommitSent: func(pid uint32, _ func()) {
			if !armed.CompareAndSwap(true, false) {
				return
			}
			if afterCommit.Load() {
				waitForBalance(t, probe, id, balance)
			}
			if _, err := probe.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, int64(pid)); err != nil {
				t.Error(err)
			}
		},
	}})
	probe = newStack(t, dbURL, &clock{now: noon})
	var key commands.IssuedKey
	id, key = fundedAccount(t, s, 500)
	hash := domain.HashKey(key.APIKey)
	paid, unknown := 0, 0
	for i := range 40 {
		afterCommit.Store(i%2 == 1) // at once, or once the commit is durable
		balance = int64(1000 - paid - 1)
		armed.Store(true)
		resource := domain.PlaceResource(fmt.Sprintf("p%d", i))
		res, err := s.charge(hash, domain.OpPlaceDetail, resource)
		var inLedger bool
		if err := probe.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM events e JOIN streams st USING (stream_no)
			WHERE st.stream_id = $1 AND e.type = 'RequestCharged' AND e.payload::text LIKE '%' || $2 || '"%')`,
			domain.AccountStream(id), resource).Scan(&inLedger); err != nil {
			t.Fatal(err)
		}
		switch {
		case err == nil:
			if res.Credits != 1 || !inLedger {
				t.Fatalf("charge %d: paid answer %+v, in the ledger: %v", i, res, inLedger)
			}
			paid++
		case errors.Is(err, domain.ErrOutcomeUnknown):
			unknown++
			if inLedger {
				paid++
			}
		case httpx.MapError(err).Outcome == httpx.OutcomeNone: // domain.ErrUnavailable, a lost connection
			if inLedger {
				t.Fatalf("charge %d: answered %v but the charge is in the ledger", i, err)
			}
		default:
			t.Fatalf("charge %d: %v", i, err)
		}
	}
	l := ledgerOf(t, probe, id)
	if l.balance != int64(1000-paid) || !l.consistent() {
		t.Fatalf("ledger %+v after %d paid (%d unknown); want balance %d", l, paid, unknown, 1000-paid)
	}
	t.Logf("%d of 40 charges committed, %d answered outcome unknown", paid, unknown)
	// Whatever the meter was told, its dedup claims follow the ledger: asked again for all 40
	// (one list), it pays exactly for those the ledger does not hold.
	all := make([]string, 40)
	for i := range all {
		all[i] = domain.PlaceResource(fmt.Sprintf("p%d", i))
	}
	// The pool may still hold connections the server ended after their exchange was over:
	// each fails the batch it is tried on before anything is written.
	var res commands.ChargeResult
	var err error
	for range 10 {
		if res, err = s.charge(hash, domain.OpPlaceList, all...); httpx.MapError(err).Outcome != httpx.OutcomeNone {
			break
		}
	}
	if err != nil || res.Credits != int64(40-paid) || len(res.Deduplicated) != paid {
		t.Fatalf("all 40 again: %+v %v; want %d paid and %d deduplicated", res.ChargeDecision, err, 40-paid, paid)
	}
	auditClean(t, probe.pool)
}

// A request cancelled while its batch commits still learns what its batch did: the charge
// happened, so the answer is the charge's, not "cancelled, nothing charged".
func TestARequestCancelledWhileItsBatchCommitsGetsTheBatchsAnswer(t *testing.T) {
	var cancel context.CancelFunc
	var once sync.Once
	s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon}, commands.MeterOptions{Hooks: commands.MeterHooks{
		AfterCommitSent: func(uint32, func()) {
			if cancel != nil {
				once.Do(cancel)
			}
		}}})
	id, key := fundedAccount(t, s, 500)
	c, err := s.meter.Authenticate(ctx, domain.HashKey(key.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	reqCtx, cancelReq := context.WithCancel(ctx)
	cancel = cancelReq
	res, err := s.meter.Charge(reqCtx, commands.ChargeRequest{Caller: c, Operation: domain.OpPlaceDetail, Resources: []string{domain.PlaceResource("p1")}})
	if err != nil || res.Credits != 1 {
		t.Fatalf("answer %+v %v; want the charge that committed", res, err)
	}
	if l := ledgerOf(t, s, id); l.balance != 999 {
		t.Fatalf("balance %d, want 999", l.balance)
	}
}

// A revoke that commits while a charge waits for the account's lock must be seen by that
// charge: the key's state is read after the lock is taken.
func TestAKeyRevokedWhileAChargeWaitsForTheAccountLockIsRefused(t *testing.T) {
	s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon})
	id, key := fundedAccount(t, s, 500)
	c, err := s.meter.Authenticate(ctx, domain.HashKey(key.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	// The revoke, done by hand so that it can hold the account's lock while the charge queues
	// behind it: lock, revoke, then commit.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE api_keys SET state = 'revoked', revoked_at = $2 WHERE key_id = $1`, key.KeyID, noon); err != nil {
		t.Fatal(err)
	}
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		o.res, o.err = s.meter.Charge(ctx, commands.ChargeRequest{Caller: c, Operation: domain.OpPlaceDetail, Resources: []string{domain.PlaceResource("p1")}})
		done <- o
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting bool
		_ = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting)
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the charge never waited for the account lock")
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if !errors.Is(o.err, domain.ErrKeyRevoked) {
		t.Fatalf("charge: %+v %v; want the revoke that committed before the lock was granted to refuse it", o.res, o.err)
	}
	if l := ledgerOf(t, s, id); l.balance != 1000 || l.charges != 0 {
		t.Fatalf("ledger %+v; want nothing charged", l)
	}
}

// Two processes whose clocks disagree by an hour charge one account at once. Within the
// account's stream recorded_at never goes back, so balance-at is a balance the account had.
func TestChargesFromSkewedClocksNeverMoveAStreamsTimeBack(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ahead := &clock{now: noon.Add(time.Hour)}
	behind := &clock{now: noon}
	a, b := newStack(t, dbURL, ahead), newStack(t, dbURL, behind)
	id, key := fundedAccount(t, a, 500)
	hash := domain.HashKey(key.APIKey)
	var wg sync.WaitGroup
	for i := 0; i < 120; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			if _, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource(fmt.Sprint("p", i))); err != nil {
				t.Error(err)
			}
			ahead.Advance(time.Millisecond)
			behind.Advance(time.Millisecond)
		}(i)
	}
	wg.Wait()
	var prev time.Time
	after := int64(0)
	for {
		page, err := a.views.Ledger(ctx, id, after, 50)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			if e.RecordedAt.Before(prev) {
				t.Fatalf("v%d recorded at %v, before v%d's %v", e.Version, e.RecordedAt, e.Version-1, prev)
			}
			prev = e.RecordedAt
		}
		after = page[len(page)-1].Position
	}
	auditClean(t, a.pool)
}

// A process whose clock still reads the day before charges an account that another process
// already charged after midnight. The charge takes the account's newest time, so it looks its
// claims up, and claims, on the day the account is in, not on its own clock's day: a resource
// paid after midnight is not paid again, and one paid now is not paid again after midnight.
func TestAClockBehindMidnightDedupsOnTheDayTheAccountIsIn(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	midnight := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	ahead := &clock{now: midnight.Add(30 * time.Second)}
	behind := &clock{now: midnight.Add(-30 * time.Second)}
	a, b := newStack(t, dbURL, ahead), newStack(t, dbURL, behind)
	_, late := fundedAccount(t, b, 500)
	_, onTime := fundedAccount(t, b, 500)
	lateHash, onTimeHash := domain.HashKey(late.APIKey), domain.HashKey(onTime.APIKey)
	p1, p2 := domain.PlaceResource("p1"), domain.PlaceResource("p2")

	charge := func(s stack, hash domain.KeyHash, r string) commands.ChargeResult {
		t.Helper()
		res, err := s.charge(hash, domain.OpPlaceDetail, r)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := charge(a, lateHash, p1); len(res.Paid) != 1 {
		t.Fatalf("first charge after midnight: %+v", res.ChargeDecision)
	}
	if res := charge(b, lateHash, p1); len(res.Deduplicated) != 1 || res.Credits != 0 {
		t.Fatalf("p1 again from the clock behind midnight: %+v, want it deduplicated", res.ChargeDecision)
	}
	if res := charge(b, lateHash, p2); len(res.Paid) != 1 {
		t.Fatalf("p2 from the clock behind midnight: %+v", res.ChargeDecision)
	}
	if res := charge(a, lateHash, p2); len(res.Deduplicated) != 1 || res.Credits != 0 {
		t.Fatalf("p2 again after midnight: %+v, want it deduplicated (claimed on the account's day)", res.ChargeDecision)
	}
	// The other account is still before midnight: its day's claims are its own.
	if res := charge(b, onTimeHash, p1); len(res.Paid) != 1 {
		t.Fatalf("p1 for an account still before midnight: %+v", res.ChargeDecision)
	}
	if res := charge(a, onTimeHash, p1); len(res.Paid) != 1 {
		t.Fatalf("p1 for that account after midnight: %+v, want it paid on the new day", res.ChargeDecision)
	}
	auditClean(t, a.pool)
}

// The meter reads an account's charges from a position of its stream on: the read walks the
// events_stream index from there, in the plan a prepared statement settles on too, so its
// cost follows what it returns, not how long the stream is.
func TestTheClaimReadWalksTheStreamFromAPositionInEveryPlan(t *testing.T) {
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO events (version, recorded_at, stream_no, type, hash, payload)
		SELECT v, '2026-11-23T12:00:00Z', no, CASE WHEN v % 2 = 0 THEN 'RequestCharged' ELSE 'RequestDeduplicated' END,
			'\x00', json_build_object('k', 1, 'op', 'places.detail', 'paid', json_build_array('place:p' || v), 'd', -1, 'b', 0)
		FROM generate_series(1, 200) v, generate_series(1, 100) no ORDER BY no, v;
		ANALYZE events`); err != nil {
		t.Fatal(err)
	}
	conn := prepareClaims(t, pool)
	// Stream 7's events are at positions 1201-1400 (versions 1-200).
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		lines := explainClaims(t, conn, mode, `'{7,8}', '{1390,1400}', '{190,0}', '{NULL,2026-11-23}'`)
		plan := strings.Join(lines, "\n")
		walked := false
		for _, l := range lines {
			// The partition holding the events; the empty ones after it may be scanned.
			if strings.Contains(l, "Seq Scan on events_p0000000000000000001 ") {
				t.Fatalf("%s: the events are scanned, not walked by the index:\n%s", mode, plan)
			}
			if strings.Contains(l, "Index Cond:") && strings.Contains(l, "(stream_no = u.no)") && strings.Contains(l, `("position" > (COALESCE(max(c."position"), u.after_position)))`) {
				walked = true
			}
		}
		if !walked {
			t.Fatalf("%s: no index walk of a stream from a position:\n%s", mode, plan)
		}
	}
	var found []string
	var no int32
	var payload string
	// Stream 8 has saved its claims up to version 198 (position 1598) in a chunk of the day.
	if _, err := conn.Exec(ctx, `INSERT INTO claim_chunks VALUES (8, '2026-11-23', 198, 1598, '\x00')`); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `EXECUTE claims('{7,8}', '{1390,1400}', '{195,0}', '{NULL,2026-11-23}')`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&no, &payload}, func() error {
		f, err := domain.DecodeAccountFact(domain.EventRequestCharged, []byte(payload))
		found = append(found, fmt.Sprint(no, f.Paid, err))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(found)
	// Stream 7 after version 195: the charges at 196, 198 and 200; stream 8 after its chunk:
	// the charge at 200.
	if want := "[7 [place:p196] <nil> 7 [place:p198] <nil> 7 [place:p200] <nil> 8 [place:p200] <nil>]"; fmt.Sprint(found) != want {
		t.Fatalf("read %v, want %s", found, want)
	}
}

// prepareClaims holds a connection of pool with the meter's claim read prepared as claims.
func prepareClaims(t *testing.T, pool *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(ctx, `PREPARE claims(int[], bigint[], bigint[], date[]) AS `+commands.ClaimEventsSQL); err != nil {
		t.Fatal(err)
	}
	return conn
}

// explainClaims is the plan of the claim read of args (its four arrays, as SQL) under the
// plan_cache_mode mode.
func explainClaims(t *testing.T, conn *pgxpool.Conn, mode, args string) []string {
	t.Helper()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = `+mode); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE claims(`+args+`)`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// A partition most of whose events are one busy stream's must not make the reads of the others
// scan it: ANALYZE samples it as holding a handful of streams, and without the fixed estimate
// every partition gets (migration 0022) the claim read of any other account — which joins its
// stream numbers, so the planner cannot look them up — scanned the whole partition: seconds a
// read on a store with a 10,000,000-event account, instead of microseconds. Here the partition
// is analyzed while it holds the busy stream alone, as ANALYZE's sample of such a partition
// finds it.
func TestAStreamThatFillsItsPartitionLeavesTheClaimReadsOfOthersOnTheIndex(t *testing.T) {
	pool := pgtest.NewPool(t)
	// Stream 1's 100,000 events, the partition's statistics taken, then four other streams'.
	const charges = `INSERT INTO events (version, recorded_at, stream_no, type, hash, payload)
		SELECT v, '2026-11-23T12:00:00Z', no, 'RequestCharged', '\x00', '{"k":1,"op":"places.detail","paid":["place:p1"],"d":-1,"b":0}'
		FROM generate_series($1::int, $2::int) no, generate_series(1, $3::int) v ORDER BY no, v`
	for _, step := range []func() error{
		func() error { _, err := pool.Exec(ctx, charges, 1, 1, 100000); return err },
		func() error { _, err := pool.Exec(ctx, `ANALYZE events`); return err },
		func() error { _, err := pool.Exec(ctx, charges, 2, 5, 50); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	var unset []string
	rows, err := pool.Query(ctx, `SELECT p.name FROM kyapi_event_partitions() p
		WHERE NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = format('%I', p.name)::regclass
			AND a.attname = 'stream_no' AND 'n_distinct=-0.01' = ANY(a.attoptions))`)
	if err != nil {
		t.Fatal(err)
	}
	if unset, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(unset) > 0 {
		t.Fatalf("partitions without the streams' estimate: %v (%v)", unset, err)
	}
	conn := prepareClaims(t, pool)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		// Streams 3 and 4, cold: their claims from their first charge of the day.
		lines := explainClaims(t, conn, mode, `'{3,4}', '{100000,100050}', '{0,0}', '{2026-11-23,2026-11-23}'`)
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "Seq Scan on events_p0000000000000000001 ") {
			t.Fatalf("%s: the partition a busy stream fills is scanned for the claims of two others:\n%s", mode, plan)
		}
		// The estimate is what turns the plan: at this size the index is still chosen without the
		// fixed estimate (which puts another stream's claims here at 11,000 events); at
		// 4,000,000 events a partition it is not (a whole partition read: 1.97 s, against
		// 0.76 ms on the index, measured on the benchmark store).
		for _, l := range lines {
			m := regexp.MustCompile(`Scan on events_p0000000000000000001 .*?rows=(\d+)`).FindStringSubmatch(l)
			if m == nil {
				continue
			}
			if n, _ := strconv.Atoi(m[1]); n > 1000 {
				t.Fatalf("%s: another stream's claims in the partition a busy stream fills are estimated at %d events:\n%s", mode, n, plan)
			}
		}
	}
}

// A meter keeps its claims within its bound: past it, the accounts charged longest ago are
// forgotten and read back from their events when they are next charged, and a new UTC day
// forgets the days before. Forgotten or not, no resource is paid twice in a day.
func TestAMeterKeepsItsClaimsWithinItsBoundAndReadsForgottenOnesBack(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk, commands.MeterOptions{MaxClaims: 10})
	var hashes []domain.KeyHash
	for range 5 {
		_, key := fundedAccount(t, s, 500)
		hashes = append(hashes, domain.HashKey(key.APIKey))
	}
	list := func(day, n int) []string {
		rows := make([]string, n)
		for i := range rows {
			rows[i] = domain.PlaceResource(fmt.Sprint("d", day, "p", i))
		}
		return rows
	}
	for round := range 2 {
		for i, h := range hashes {
			res, err := s.charge(h, domain.OpPlaceList, list(0, 6)...)
			if want := map[int]int64{0: 6, 1: 0}[round]; err != nil || res.Credits != want {
				t.Fatalf("round %d, account %d: %+v %v; want %d credits", round, i, res.ChargeDecision, err, want)
			}
			if held := s.meter.ClaimsHeld(); held > 10 {
				t.Fatalf("round %d, account %d: %d claims held; the bound is 10", round, i, held)
			}
		}
	}
	if held := s.meter.ClaimsHeld(); held == 0 {
		t.Fatal("no claims held")
	}
	// Five accounts of six claims each, twice over, in a bound of ten: each charge after the
	// first forgot at least one account.
	forgotten := s.meter.ClaimsForgotten()
	if forgotten < 9 {
		t.Fatalf("%d accounts' claims counted as forgotten for the bound; want at least 9", forgotten)
	}
	clk.Advance(24 * time.Hour)
	if res, err := s.charge(hashes[0], domain.OpPlaceList, list(1, 2)...); err != nil || res.Credits != 2 {
		t.Fatalf("next day: %+v %v", res.ChargeDecision, err)
	}
	if held := s.meter.ClaimsHeld(); held != 2 {
		t.Fatalf("%d claims held on the next day; want only its 2", held)
	}
	if n := s.meter.ClaimsForgotten(); n != forgotten {
		t.Fatalf("the new day's sweep counted as forgotten for the bound: %d, was %d", n, forgotten)
	}
}

// waitForBalance waits until the account's balance, as the write model holds it, is want:
// the charge a hook holds has committed.
func waitForBalance(t *testing.T, probe stack, accountID string, want int64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		var balance int64
		if err := probe.pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE account_id = $1`, accountID).Scan(&balance); err == nil && balance == want {
			return
		}
	}
	t.Errorf("the balance of %s never became %d", accountID, want)
}

// A batch's connection goes silent once its COMMIT is sent — no answer, no close: a network
// partition, a failover that leaves the old socket open. It is taken for lost after the
// batch's wait: the charge is answered as it happened (its outcome read on a connection of its
// own), the backend it left is ended (so its account's locks are free), and the meter goes on
// for that account and for another whose charge queued behind it in the same lane.
func TestABatchWhoseConnectionGoesSilentIsAnsweredAndTheMeterGoesOn(t *testing.T) {
	var armed atomic.Bool
	var proxy *silentProxy
	// s meters through the proxy. The test's own reads of the store go around it (direct): a
	// connection it froze can sit idle in s's pool for less than the pool's ping interval, and
	// a read sent on it would never end.
	direct, s, proxy := processesApart(t, &clock{now: noon}, "&pool_ping_timeout=500ms", commands.MeterOptions{Workers: 1, BatchWait: 2 * time.Second,
		Hooks: commands.MeterHooks{AfterCommitSent: func(uint32, func()) {
			if armed.CompareAndSwap(true, false) {
				proxy.freeze()
			}
		}}})
	id, key := fundedAccount(t, s, 500)
	_, other := fundedAccount(t, s, 500)
	hash, otherHash := domain.HashKey(key.APIKey), domain.HashKey(other.APIKey)
	mustCharge(t, s, hash, "p1", 1)
	armed.Store(true)
	type answer struct {
		res commands.ChargeResult
		err error
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p2"))
		first <- answer{res, err}
	}()
	for armed.Load() {
		time.Sleep(time.Millisecond)
	}
	go func() {
		res, err := s.charge(otherHash, domain.OpPlaceDetail, domain.PlaceResource("p9"))
		second <- answer{res, err}
	}()
	// Not a time limit on the answer: a guard so that a hang fails rather than stalls the run.
	wait := func(c chan answer, what string) answer {
		select {
		case a := <-c:
			return a
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s: no answer while the connection stays silent", what)
			return answer{}
		}
	}
	a := wait(first, "the charge whose connection went silent")
	l := ledgerOf(t, direct, id)
	switch {
	case a.err == nil && a.res.Credits == 1 && l.balance == 998:
	case errors.Is(a.err, domain.ErrUnavailable) && l.balance == 999:
	default:
		t.Fatalf("answer %+v %v with balance %d; want paid and charged, or unavailable and not", a.res, a.err, l.balance)
	}
	if b := wait(second, "the other account's charge"); b.err != nil && !errors.Is(b.err, domain.ErrUnavailable) {
		t.Fatalf("the other account's charge: %+v %v", b.res, b.err)
	}
	var left int
	if err := direct.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d backends left idle in a transaction, holding their accounts' locks", left)
	}
	for _, c := range []struct {
		hash  domain.KeyHash
		place string
	}{{hash, "p3"}, {otherHash, "p8"}} {
		if res, err := s.charge(c.hash, domain.OpPlaceDetail, domain.PlaceResource(c.place)); err != nil || res.Credits != 1 {
			t.Fatalf("charging %s after the partition: %+v %v", c.place, res, err)
		}
	}
	auditClean(t, direct.pool)
}

// A batch decided under the lock whose connection is lost before its writes: nothing of it was
// charged, so its paid charges answer 503 unavailable; a charge it refused (402) still answers
// 402, which is what it was, not 503.
func TestARefusalInALostBatchStandsAndThePaidChargesAreUnavailable(t *testing.T) {
	var writes atomic.Int32
	gs := newGatedStack(t, &clock{now: noon}, commands.MeterHooks{BeforeWrite: func(cut func()) {
		if writes.Add(1) == 2 { // the batch after the holder's
			cut()
		}
	}})
	_, holder := fundedAccount(t, gs.stack, 500)
	// The account is brought down to 5 credits by another process, so that this meter holds
	// nothing of it and decides its charges under the lock.
	other := newStack(t, gs.pool.Config().ConnString(), gs.clock)
	id, key := fundedAccount(t, other, 500)
	hash := domain.HashKey(key.APIKey)
	spend := make([]string, 995)
	for i := range spend {
		spend[i] = domain.PlaceResource(fmt.Sprint("spent-", i))
	}
	if res, err := other.charge(hash, domain.OpPlaceList, spend...); err != nil || res.Balance != 5 {
		t.Fatalf("spending down: %+v %v", res, err)
	}
	out := gs.oneBatch(t, domain.HashKey(holder.APIKey), []chargeReq{
		{hash, domain.OpPlaceDetail, []string{domain.PlaceResource("p1")}},
		{hash, domain.OpTowns, []string{domain.TownsResource}},
	})
	if !errors.Is(out[0].err, domain.ErrUnavailable) {
		t.Errorf("the paid charge of the lost batch: %+v %v; want unavailable", out[0].res, out[0].err)
	}
	// Refused at the 4 credits left after the lost detail, it is refused at the 5 the account
	// holds too, and says so.
	var ic *domain.InsufficientCreditsError
	if !errors.As(out[1].err, &ic) || ic.Balance != 5 {
		t.Errorf("the refused charge of the lost batch: %+v %v; want insufficient credits at 5", out[1].res, out[1].err)
	}
	if l := ledgerOf(t, gs.stack, id); l.balance != 5 || !l.consistent() {
		t.Errorf("ledger %+v; want 5 credits left, nothing charged", l)
	}
}

// A charge refused in a batch whose commit was lost was refused against a balance the batch's
// earlier charges of the account had spent, and those were not written: neither the refusal
// nor the balance it reports (X-Credits-Remaining) holds, so it is 503 unavailable — nothing
// was charged. A refusal at the balance the account held before the batch stands.
func TestA402InALostBatchStandsOnlyAtTheBalanceTheBatchFound(t *testing.T) {
	var writes atomic.Int32
	gs := newGatedStack(t, &clock{now: noon}, commands.MeterHooks{BeforeWrite: func(cut func()) {
		if writes.Add(1) == 2 { // the second batch: the accounts' charges below
			cut()
		}
	}})
	_, hkey := fundedAccount(t, gs.stack, 0)
	victim, vkey := fundedAccount(t, gs.stack, 500)
	vhash := domain.HashKey(vkey.APIKey)
	_, pkey := fundedAccount(t, gs.stack, 0) // holds nothing
	phash := domain.HashKey(pkey.APIKey)
	before := ledgerOf(t, gs.stack, victim).balance
	all := make([]string, before)
	for i := range all {
		all[i] = domain.PlaceResource(fmt.Sprintf("p%d", i))
	}
	out := gs.oneBatch(t, domain.HashKey(hkey.APIKey), []chargeReq{
		{vhash, domain.OpPlaceList, all},                                   // spends the whole balance
		{vhash, domain.OpPlaceDetail, []string{domain.PlaceResource("x")}}, // refused: nothing left
		{phash, domain.OpPlaceDetail, []string{domain.PlaceResource("y")}}, // refused at 0, before anything
	})
	if !errors.Is(out[0].err, domain.ErrUnavailable) {
		t.Fatalf("first charge: %+v %v; want unavailable (its commit was lost)", out[0].res, out[0].err)
	}
	if l := ledgerOf(t, gs.stack, victim); l.balance != before {
		t.Fatalf("balance %d, want %d: nothing was written", l.balance, before)
	}
	if !errors.Is(out[1].err, domain.ErrUnavailable) {
		t.Errorf("the charge refused after the lost charges spent the balance: %v; want unavailable", out[1].err)
	}
	var ic *domain.InsufficientCreditsError
	if !errors.As(out[2].err, &ic) || ic.Balance != 0 {
		t.Errorf("the charge refused at the balance the account held: %v; want 402 at 0", out[2].err)
	}
}

// A 402 decided from the meter's memory, in a batch whose commit was lost and whose outcome
// could not be found out, does not stand: the memory may have been behind — credits bought
// through another process, which kyapi_charge would have found at the commit — so it answers
// 503 unavailable, nothing charged, not a refusal at a balance the account no longer holds.
func TestA402FromMemoryInALostBatchWhoseOutcomeIsUnknownIsUnavailable(t *testing.T) {
	defer commands.SetOutcomeWait(time.Second)()
	var (
		gateOn, armed atomic.Bool
		entered       = make(chan struct{})
		release       = make(chan struct{})
		id            string
		held          pgx.Tx
		s             stack
	)
	s = newStack(t, pgtest.NewDatabase(t), &clock{now: noon}, commands.MeterOptions{Workers: 1,
		BeforeBatch: func(n int) {
			if gateOn.CompareAndSwap(true, false) {
				close(entered)
				<-release
			}
			if n == 2 { // the account's two charges below
				armed.Store(true)
			}
		},
		Hooks: commands.MeterHooks{AfterCommitSent: func(_ uint32, cut func()) {
			if !armed.CompareAndSwap(true, false) {
				return
			}
			cut()
			// Another transaction takes the account's row once the lost session lets go of it,
			// so that what the batch did cannot be read under the lock in time.
			tx, err := s.pool.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, id); err != nil {
				t.Error(err)
			}
			held = tx
		}}})
	var key commands.IssuedKey
	id, key = fundedAccount(t, s, 500) // 1,000 credits
	hash := domain.HashKey(key.APIKey)
	spend := make([]string, 1000)
	for i := range spend {
		spend[i] = domain.PlaceResource(fmt.Sprint("p", i))
	}
	if res, err := s.charge(hash, domain.OpPlaceList, spend...); err != nil || res.Balance != 0 {
		t.Fatalf("spending it all: %+v %v", res, err)
	}
	// Another process sells the account 1,000 credits: this meter still holds it at 0.
	other := newStack(t, s.pool.Config().ConnString(), s.clock)
	if _, err := other.accounts.Purchase(ctx, id, 500, "pay-2-"+id, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	_, holder := fundedAccount(t, s, 0)

	// The holder's charge takes the worker and waits at the gate while the account's two
	// charges queue behind it: they make the next batch, decided from memory.
	gateOn.Store(true)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = s.charge(domain.HashKey(holder.APIKey), domain.OpPlaceList)
	}()
	<-entered
	out := make([]outcome, 2)
	for i, place := range []string{"p0", "new"} { // paid today (deduplicated), then a new one
		c, err := s.meter.Authenticate(ctx, hash)
		if err != nil {
			t.Fatal(err)
		}
		queued := s.meter.Pending()
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].res, out[i].err = s.meter.Charge(ctx, commands.ChargeRequest{Caller: c, Operation: domain.OpPlaceDetail,
				Resources: []string{domain.PlaceResource(place)}})
		}()
		for s.meter.Pending() <= queued {
			time.Sleep(100 * time.Microsecond)
		}
	}
	close(release)
	wg.Wait()
	if held == nil {
		t.Fatal("the account's batch was never cut after its commit was sent")
	}
	_ = held.Rollback(ctx)

	if l := ledgerOf(t, s, id); l.balance != 1000 || !l.consistent() {
		t.Fatalf("ledger %+v; want the 1,000 credits bought, nothing charged", l)
	}
	if !errors.Is(out[0].err, domain.ErrOutcomeUnknown) {
		t.Errorf("the deduplicated charge of the lost batch: %+v %v; want its outcome unknown", out[0].res, out[0].err)
	}
	if !errors.Is(out[1].err, domain.ErrUnavailable) {
		t.Errorf("the charge refused from memory in the lost batch: %+v %v; want unavailable (the account holds 1,000 credits)", out[1].res, out[1].err)
	}
	// The meter then decides the account from the store: the new place is charged.
	if res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("new")); err != nil || res.Credits != 1 || res.Balance != 999 {
		t.Errorf("the new place once the row is free: %+v %v; want charged, 999 left", res, err)
	}
}
