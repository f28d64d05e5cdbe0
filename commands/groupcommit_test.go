package commands_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// withGroup gives the stack's charger a group committer, closed when the test ends.
func withGroup(t *testing.T, s stack, opts commands.GroupCommitOptions) (stack, *commands.GroupCommitter) {
	g := commands.NewGroupCommitter(s.charger.Store, s.clock.Now, opts)
	t.Cleanup(g.Close)
	s.charger.Group = g
	return s, g
}

// gatedStack is a stack whose committer has one worker and holds its first batch at a gate,
// so that every charge submitted meanwhile joins the second batch.
type gatedStack struct {
	stack
	group   *commands.GroupCommitter
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	sizes   []int
}

func newGatedStack(t *testing.T, clk *clock) *gatedStack {
	gs := &gatedStack{entered: make(chan struct{}), release: make(chan struct{})}
	gs.stack, gs.group = withGroup(t, newStack(t, pgtest.NewDatabase(t), clk), commands.GroupCommitOptions{Workers: 1,
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

// oneBatch charges reqs in one batch: a charge that changes nothing holds the worker at the
// gate while they queue up.
func (gs *gatedStack) oneBatch(t *testing.T, holder domain.KeyHash, reqs []commands.ChargeRequest) []outcome {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := gs.charger.Charge(ctx, commands.ChargeRequest{KeyHash: holder, Operation: domain.OpPlaceList}); err != nil {
			t.Error(err)
		}
	}()
	<-gs.entered
	// One at a time, so that they queue in the order given.
	out := make([]outcome, len(reqs))
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].res, out[i].err = gs.charger.Charge(ctx, r)
		}()
		for deadline := time.Now().Add(10 * time.Second); gs.group.Pending() <= i; time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d charges queued", gs.group.Pending(), len(reqs))
			}
		}
	}
	close(gs.release)
	wg.Wait()
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if len(gs.sizes) != 2 || gs.sizes[1] != len(reqs) {
		t.Fatalf("batch sizes %v; want [1 %d]", gs.sizes, len(reqs))
	}
	return out
}

// ledger is an account's head row next to what its event stream says.
type ledger struct {
	balance, version       int64
	deltas, events, maxVer int64
}

func ledgerOf(t *testing.T, s stack, accountID string) ledger {
	t.Helper()
	var l ledger
	pool := s.accounts.Store.Pool
	if err := pool.QueryRow(ctx, `SELECT balance, version FROM accounts WHERE account_id = $1`, accountID).Scan(&l.balance, &l.version); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum((payload->>'credits_delta')::bigint), 0), count(*), coalesce(max(version), 0)
		FROM events WHERE stream_id = $1`, domain.AccountStream(accountID)).Scan(&l.deltas, &l.events, &l.maxVer); err != nil {
		t.Fatal(err)
	}
	return l
}

// consistent reports whether the head equals the sum of the ledger and versions have no gap.
func (l ledger) consistent() bool {
	return l.balance == l.deltas && l.version == l.maxVer && l.events == l.maxVer
}

func TestTwoGroupCommittersCharging200TimesAt5CreditsSpendExactly500(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	a, _ := withGroup(t, newStack(t, dbURL, clk), commands.GroupCommitOptions{})
	b, _ := withGroup(t, newStack(t, dbURL, clk), commands.GroupCommitOptions{})
	accountID := race200ChargesOn500Credits(t, a, b)
	l := ledgerOf(t, a, accountID)
	var charges int
	if err := a.accounts.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE stream_id = $1 AND type = 'RequestCharged'`,
		domain.AccountStream(accountID)).Scan(&charges); err != nil {
		t.Fatal(err)
	}
	if l.balance != 0 || !l.consistent() || charges != 101 {
		t.Fatalf("ledger %+v, charges %d; want balance 0 matching its events, 101 charges (with the spend-down)", l, charges)
	}
}

func TestAFailingChargeInABatchFailsAloneAndTheOthersCommit(t *testing.T) {
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	gs := newGatedStack(t, clk)
	rich, richKey := fundedAccount(t, gs.stack, 500) // 1,000 credits
	poor, poorKey := fundedAccount(t, gs.stack, 0)
	revoked, revokedKey := fundedAccount(t, gs.stack, 500)
	if err := gs.accounts.RevokeKey(ctx, revoked, revokedKey.KeyID, "", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	richHash := domain.HashKey(richKey.APIKey)
	detail := func(hash domain.KeyHash, place string) commands.ChargeRequest {
		return commands.ChargeRequest{KeyHash: hash, Operation: domain.OpPlaceDetail, Resources: []string{domain.PlaceResource(place)}}
	}
	reqs := []commands.ChargeRequest{
		detail(richHash, "p1"),
		{KeyHash: domain.HashKey(poorKey.APIKey), Operation: domain.OpTowns, Resources: []string{domain.TownsResource}},
		detail(richHash, "p2"),
		detail(domain.HashKey(revokedKey.APIKey), "p1"),
		detail(domain.HashKey("svc_live_unknown"), "p1"),
		detail(richHash, "bad\x00name"), // PostgreSQL refuses NUL in text: an SQL error mid-batch
		detail(richHash, "p3"),
	}
	out := gs.oneBatch(t, richHash, reqs)

	for i, want := range []error{nil, domain.ErrInsufficientCredits, nil, domain.ErrKeyRevoked, domain.ErrInvalidKey, nil, nil} {
		if i == 5 {
			if out[i].err == nil {
				t.Errorf("charge %d with a NUL byte succeeded: %+v", i, out[i].res)
			}
			continue
		}
		if !errors.Is(out[i].err, want) {
			t.Errorf("charge %d: %v; want %v", i, out[i].err, want)
		}
	}
	balances := []int64{out[0].res.Balance, out[2].res.Balance, out[6].res.Balance}
	if balances[0] != 999 || balances[1] != 998 || balances[2] != 997 {
		t.Fatalf("balances after the three paid details %v; want [999 998 997]", balances)
	}
	if l := ledgerOf(t, gs.stack, rich); l.balance != 997 || !l.consistent() {
		t.Fatalf("rich account %+v; want balance 997 matching its events", l)
	}
	if l := ledgerOf(t, gs.stack, poor); l.balance != 0 || l.deltas != 0 {
		t.Fatalf("poor account %+v; want nothing charged", l)
	}
	if l := ledgerOf(t, gs.stack, revoked); l.balance != 1000 || !l.consistent() {
		t.Fatalf("revoked account %+v; want nothing charged", l)
	}
}

func TestTheSameResourceTwiceInOneBatchIsChargedOnce(t *testing.T) {
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	gs := newGatedStack(t, clk)
	accountID, key := fundedAccount(t, gs.stack, 500)
	hash := domain.HashKey(key.APIKey)
	p1 := domain.PlaceResource("p1")
	reqs := []commands.ChargeRequest{
		{KeyHash: hash, Operation: domain.OpPlaceDetail, Resources: []string{p1}},
		{KeyHash: hash, Operation: domain.OpPlaceDetail, Resources: []string{p1}},
		{KeyHash: hash, Operation: domain.OpPlaceList, Resources: []string{p1, domain.PlaceResource("p2")}},
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

func TestTwoGroupCommittersChargingSeveralAccountsInMixedOrderNeverDeadlock(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	a, _ := withGroup(t, newStack(t, dbURL, clk), commands.GroupCommitOptions{MaxBatch: 16})
	b, _ := withGroup(t, newStack(t, dbURL, clk), commands.GroupCommitOptions{MaxBatch: 16})
	single := newStack(t, dbURL, clk)
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
			_, err := s.charger.Charge(ctx, commands.ChargeRequest{KeyHash: hashes[acc], RequestID: fmt.Sprint("r", i),
				Operation: domain.OpPlaceList, Resources: []string{domain.PlaceResource(fmt.Sprint("a", i)), domain.PlaceResource(fmt.Sprint("b", i))}})
			if err != nil {
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
			t.Errorf("account %s: %+v; want the head to match its events", id, l)
		}
		total += l.balance
	}
	if want := int64(accounts*(1000+7) - charges*2); total != want {
		t.Fatalf("total balance %d; want %d", total, want)
	}
}
