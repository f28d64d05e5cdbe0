package commands_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// stack is one process's commands over a database: its own pool and meter.
type stack struct {
	accounts commands.Accounts
	meter    *commands.Meter
	views    commands.Views
	pool     *pgxpool.Pool
	clock    *clock
}

func newStack(t testing.TB, dbURL string, clk *clock, opts ...commands.MeterOptions) stack {
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := eventstore.New(pool)
	var o commands.MeterOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	meter := commands.NewMeter(store, clk.Now, o)
	t.Cleanup(meter.Close)
	return stack{
		accounts: commands.Accounts{Store: store, Clock: clk.Now, KeysChanged: meter.Keys().Forget},
		meter:    meter,
		views:    commands.Views{Pool: pool},
		pool:     pool,
		clock:    clk,
	}
}

var ctx = context.Background()

var noon = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func fundedAccount(t testing.TB, s stack, cents int64) (string, commands.IssuedKey) {
	t.Helper()
	id, err := s.accounts.OpenAccount(ctx, "Test Co", "ops@test.example", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.accounts.IssueKey(ctx, id, eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if cents > 0 {
		if _, err := s.accounts.Purchase(ctx, id, cents, "pay-"+id, eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	return id, key
}

// charge authenticates a key and charges a request with it, as the read API does.
func (s stack) charge(hash domain.KeyHash, op domain.Operation, resources ...string) (commands.ChargeResult, error) {
	c, err := s.meter.Authenticate(ctx, hash)
	if err != nil {
		return commands.ChargeResult{}, err
	}
	return s.meter.Charge(ctx, commands.ChargeRequest{Caller: c, Operation: op, Resources: resources})
}

// ledger is an account's write-model row next to what its ledger says.
type ledger struct {
	balance           int64
	totals            commands.AccountTotals
	deltas, events    int64
	lastBalance       int64
	charges, dedupd   int64
	versionsContigous bool
}

func ledgerOf(t testing.TB, s stack, accountID string) ledger {
	t.Helper()
	v, err := s.views.Account(ctx, accountID, s.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	l := ledger{balance: v.Balance, totals: v.Totals, versionsContigous: true}
	after := int64(0)
	for {
		page, err := s.views.Ledger(ctx, accountID, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return l
		}
		for _, e := range page {
			l.events++
			if e.Version != l.events {
				l.versionsContigous = false
			}
			l.deltas += e.CreditsDelta
			l.lastBalance = e.BalanceAfter
			switch e.Type {
			case domain.EventRequestCharged:
				l.charges++
			case domain.EventRequestDeduplicated:
				l.dedupd++
			}
		}
		after = page[len(page)-1].Position
	}
}

// consistent reports whether the write model equals the sum of the ledger, and the ledger
// has no gap.
func (l ledger) consistent() bool {
	return l.balance == l.deltas && l.balance == l.lastBalance && l.versionsContigous &&
		l.totals.RequestsCharged == l.charges && l.totals.RequestsDeduplicated == l.dedupd &&
		l.totals.PurchasedCredits+l.totals.BonusCredits-l.totals.ChargedCredits == l.balance
}

// auditClean fails the test unless a full audit of the database finds nothing.
func auditClean(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	var out strings.Builder
	rep, err := audit.Run(ctx, pool, audit.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) > 0 {
		t.Fatalf("audit found %d differences:\n%s", len(rep.Differences), out.String())
	}
}

func TestTwoProcessesCharging200TimesAt5CreditsSpendExactly500(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	a, b := newStack(t, dbURL, clk), newStack(t, dbURL, clk)
	accountID := race200ChargesOn500Credits(t, a, b)
	l := ledgerOf(t, a, accountID)
	if l.balance != 0 || !l.consistent() || l.charges != 101 {
		t.Fatalf("ledger %+v; want balance 0 matching its events, 101 charges (with the spend-down)", l)
	}
	auditClean(t, a.pool)
}

// race200ChargesOn500Credits spends an account down to 500 credits, then sends 200
// concurrent 5-credit charges of distinct resources, alternating between the two stacks
// (two processes), and checks that exactly 100 succeed and 100 are refused. It returns the
// account for the caller's ledger checks.
func race200ChargesOn500Credits(t *testing.T, a, b stack) string {
	t.Helper()
	accountID, key := fundedAccount(t, a, 500) // 1,000 credits
	hash := domain.HashKey(key.APIKey)
	rows := make([]string, 500)
	for i := range rows {
		rows[i] = domain.PlaceResource(fmt.Sprint("p", i))
	}
	if res, err := a.charge(hash, domain.OpPlaceList, rows...); err != nil || res.Balance != 500 {
		t.Fatalf("spending down to 500: %+v %v", res.Balance, err)
	}

	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			_, err := s.charge(hash, domain.OpEvents, domain.EventsResource("berea", "2026-12-01", fmt.Sprintf("2026-12-%02d", i%28+1))+fmt.Sprint("#", i))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, domain.ErrInsufficientCredits):
				refused.Add(1)
			default:
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if ok.Load() != 100 || refused.Load() != 100 {
		t.Fatalf("succeeded %d, refused %d; want 100 and 100", ok.Load(), refused.Load())
	}
	return accountID
}

func TestSameResourceTheSameDayIsChargedOnceAndAgainAfterMidnight(t *testing.T) {
	clk := &clock{now: time.Date(2026, 11, 23, 23, 59, 0, 0, time.UTC)}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	_, key := fundedAccount(t, s, 500)
	hash := domain.HashKey(key.APIKey)
	first, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p1"))
	if err != nil || first.Credits != 1 {
		t.Fatalf("first: %+v %v", first, err)
	}
	second, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p1"))
	if err != nil || second.Credits != 0 || !second.FullyDeduplicated() || second.Balance != first.Balance {
		t.Fatalf("second: %+v %v", second, err)
	}
	clk.Advance(time.Minute)
	third, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p1"))
	if err != nil || third.Credits != 1 {
		t.Fatalf("after midnight: %+v %v", third, err)
	}
}

func TestRevokedAndExpiredKeysAreRefusedAtOnceEverywhere(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	a, b := newStack(t, dbURL, clk), newStack(t, dbURL, clk)
	accountID, first := fundedAccount(t, a, 500)
	hash1 := domain.HashKey(first.APIKey)
	if _, err := b.meter.Authenticate(ctx, hash1); err != nil {
		t.Fatalf("key issued through a is refused by b: %v", err)
	}
	second, err := a.accounts.IssueKey(ctx, accountID, eventstore.Metadata{})
	if err != nil || second.RotatedKeyID == nil || *second.RotatedKeyID != first.KeyID {
		t.Fatalf("rotation: %+v %v", second, err)
	}
	clk.Advance(24*time.Hour - time.Second)
	if _, err := b.charge(hash1, domain.OpPlaceDetail, domain.PlaceResource("p1")); err != nil {
		t.Fatalf("grace key refused at 23:59:59: %v", err)
	}
	clk.Advance(time.Second)
	// b cached the key as active before the rotation, and b hears of no notification here
	// (no listener runs in this test): the charge's own re-check refuses it.
	if _, err := b.charge(hash1, domain.OpPlaceDetail, domain.PlaceResource("p2")); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("grace key at 24:00:00: %v", err)
	}
	if _, err := b.meter.Authenticate(ctx, hash1); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("after the refused charge b still authenticates the expired key: %v", err)
	}
	hash2 := domain.HashKey(second.APIKey)
	if _, err := b.meter.Authenticate(ctx, hash2); err != nil {
		t.Fatal(err)
	}
	if err := a.accounts.RevokeKey(ctx, accountID, second.KeyID, "compromised", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.charge(hash2, domain.OpTowns, domain.TownsResource); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("charge with revoked key: %v", err)
	}
	if _, err := b.meter.Authenticate(ctx, domain.HashKey("svc_live_unknown")); !errors.Is(err, domain.ErrInvalidKey) {
		t.Fatalf("unknown key: %v", err)
	}
}

// With the notifications listened to, a revoke on one process empties the other's cache:
// the revoked key is refused at authentication, before any charge round trip.
func TestARevokeOnOneProcessReachesTheOthersKeyCache(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	a, b := newStack(t, dbURL, clk), newStack(t, dbURL, clk)
	listenCtx, stop := context.WithCancel(ctx)
	defer stop()
	go b.meter.Keys().Listen(listenCtx, nil)
	accountID, key := fundedAccount(t, a, 500)
	hash := domain.HashKey(key.APIKey)
	// Wait until b's listener is up: until then b caches nothing.
	for deadline := time.Now().Add(30 * time.Second); !b.meter.Keys().Listening(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b's key listener did not connect")
		}
	}
	if _, err := b.meter.Authenticate(ctx, hash); err != nil {
		t.Fatal(err)
	}
	if err := a.accounts.RevokeKey(ctx, accountID, key.KeyID, "", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, err := b.meter.Authenticate(ctx, hash)
		if errors.Is(err, domain.ErrKeyRevoked) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still authenticates the revoked key: %v", err)
		}
	}
}

// A key cache whose listener is not connected caches nothing: it could not hear of a revoke,
// so a revoke on another process is seen by the very next authentication.
func TestAKeyCacheWithoutItsListenerReadsEveryKeyFromTheTable(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	a, b := newStack(t, dbURL, clk), newStack(t, dbURL, clk)
	accountID, key := fundedAccount(t, a, 500)
	hash := domain.HashKey(key.APIKey)
	if b.meter.Keys().Listening() {
		t.Fatal("b listens without Listen")
	}
	if _, err := b.meter.Authenticate(ctx, hash); err != nil {
		t.Fatal(err)
	}
	if err := a.accounts.RevokeKey(ctx, accountID, key.KeyID, "", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.meter.Authenticate(ctx, hash); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("b after the revoke: %v; want revoked at once", err)
	}
}

func TestASecondRotationDuringGraceRevokesTheOlderKeyAtOnce(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	accountID, k1 := fundedAccount(t, s, 0)
	if _, err := s.accounts.IssueKey(ctx, accountID, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.meter.Authenticate(ctx, domain.HashKey(k1.APIKey)); err != nil {
		t.Fatalf("k1 in grace refused: %v", err)
	}
	if _, err := s.accounts.IssueKey(ctx, accountID, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.meter.Authenticate(ctx, domain.HashKey(k1.APIKey)); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("k1 after second rotation: %v", err)
	}
}

func TestAPaymentRefIsCountedOnce(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	accountID, _ := fundedAccount(t, s, 0)
	first, err := s.accounts.Purchase(ctx, accountID, 1000, "stripe_1", eventstore.Metadata{})
	if err != nil || first.CreditsAdded != 2000 || first.Balance != 2000 || first.Replayed {
		t.Fatalf("first: %+v %v", first, err)
	}
	again, err := s.accounts.Purchase(ctx, accountID, 1000, "stripe_1", eventstore.Metadata{})
	if err != nil || !again.Replayed || again.Balance != 2000 {
		t.Fatalf("again: %+v %v", again, err)
	}
	other, _ := fundedAccount(t, s, 0)
	if _, err := s.accounts.Purchase(ctx, other, 1000, "stripe_1", eventstore.Metadata{}); !errors.Is(err, domain.ErrPaymentRefReused) {
		t.Fatalf("reuse by another account: %v", err)
	}
	if _, err := s.accounts.Purchase(ctx, accountID, 499, "stripe_2", eventstore.Metadata{}); !errors.Is(err, domain.ErrPurchaseAmount) {
		t.Fatalf("499 cents: %v", err)
	}
}

func TestABonusIsGrantedOncePerOutageToAccountsWithUsableKeys(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	withKey, _ := fundedAccount(t, s, 0)
	revoked, k := fundedAccount(t, s, 0)
	if err := s.accounts.RevokeKey(ctx, revoked, k.KeyID, "", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.accounts.OpenAccount(ctx, "No Key", "nokey@test.example", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	res, err := s.accounts.GrantBonus(ctx, "outage-1", 100, "down 30h", eventstore.Metadata{})
	if err != nil || res.Accounts != 1 || res.Replayed {
		t.Fatalf("grant: %+v %v", res, err)
	}
	again, err := s.accounts.GrantBonus(ctx, "outage-1", 100, "down 30h", eventstore.Metadata{})
	if err != nil || !again.Replayed || again.Accounts != 1 {
		t.Fatalf("again: %+v %v", again, err)
	}
	if l := ledgerOf(t, s, withKey); l.balance != 100 || !l.consistent() || l.totals.BonusCredits != 100 {
		t.Fatalf("account with a key: %+v, want 100 bonus credits", l)
	}
	g, err := s.accounts.Grant(ctx, "outage-1")
	if err != nil || g.State != "done" || g.Accounts != 1 || g.FinishedAt == nil {
		t.Fatalf("grant progress %+v %v", g, err)
	}
}

// A grant runs in chunks of accounts; cut short after its first chunk (as by a crash), asking
// for it again finishes it, and every account is credited exactly once.
func TestABonusGrantCutShortIsFinishedByAskingAgainWithoutCreditingTwice(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	const n = 450 // three chunks
	ids := make([]string, n)
	for i := range ids {
		ids[i], _ = fundedAccount(t, s, 0)
	}
	cut, cancel := context.WithCancel(ctx)
	interrupted := s.accounts
	interrupted.GrantProgress = func(commands.BonusGrant) { cancel() }
	if _, err := interrupted.GrantBonus(cut, "outage-9", 10, "", eventstore.Metadata{}); err == nil {
		t.Fatal("the interrupted grant reported success")
	}
	g, _ := s.accounts.Grant(ctx, "outage-9")
	if g.State != "running" || g.Accounts == 0 || g.Accounts >= n {
		t.Fatalf("after the interruption: %+v; want a running grant part way through", g)
	}
	var progress []int
	resumed := s.accounts
	resumed.GrantProgress = func(g commands.BonusGrant) { progress = append(progress, g.Accounts) }
	res, err := resumed.GrantBonus(ctx, "outage-9", 10, "", eventstore.Metadata{})
	if err != nil || res.Accounts != n {
		t.Fatalf("resumed grant: %+v %v; want %d accounts", res, err, n)
	}
	if len(progress) < 2 || progress[len(progress)-1] != n {
		t.Fatalf("progress reported %v; want chunks ending at %d", progress, n)
	}
	var credited, wrong int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE bonus_credits = 10), count(*) FILTER (WHERE bonus_credits <> 10) FROM accounts`).
		Scan(&credited, &wrong); err != nil {
		t.Fatal(err)
	}
	if credited != n || wrong != 0 {
		t.Fatalf("%d accounts credited once, %d not; want all %d once", credited, wrong, n)
	}
	auditClean(t, s.pool)
}

// Account totals are kept by the commands as events happen, never summed per call; they must
// equal what the events say after charges, purchases and bonuses.
func TestAccountTotalsEqualTheEventsSums(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	id, key := fundedAccount(t, s, 700)
	hash := domain.HashKey(key.APIKey)
	if _, err := s.accounts.GrantBonus(ctx, "o", 33, "", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource(fmt.Sprint("p", i%13))); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if _, err := s.accounts.Purchase(ctx, id, 500, fmt.Sprint("more", i), eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	l := ledgerOf(t, s, id)
	want := commands.AccountTotals{PurchasedCredits: 1400 + 4*1000, BonusCredits: 33, ChargedCredits: 13, RequestsCharged: 13, RequestsDeduplicated: 27}
	if l.totals != want || !l.consistent() {
		t.Fatalf("totals %+v (ledger %+v); want %+v", l.totals, l, want)
	}
	// The balances read model, rebuilt from position 0, holds the same totals.
	balances := projections.SQL{Pool: s.pool, Applier: projections.Balances{}}
	if err := balances.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := projections.CatchUp(ctx, s.pool, balances, 7, nil); err != nil {
		t.Fatal(err)
	}
	var rebuilt commands.AccountTotals
	if err := s.pool.QueryRow(ctx, `SELECT purchased_credits, bonus_credits, charged_credits, requests_charged, requests_deduplicated
		FROM rm_balances WHERE account_id = $1`, id).Scan(&rebuilt.PurchasedCredits, &rebuilt.BonusCredits, &rebuilt.ChargedCredits,
		&rebuilt.RequestsCharged, &rebuilt.RequestsDeduplicated); err != nil {
		t.Fatal(err)
	}
	if rebuilt != want {
		t.Fatalf("rebuilt rm_balances totals %+v; want %+v", rebuilt, want)
	}
	auditClean(t, s.pool)
}

// Same-day dedup needs no table of claims: the account row says where its claims day starts in
// its stream (claims_day, claims_from), and a meter that never charged the account — another
// process, or this one restarted — reads that day's charges back from the events.
func TestTheAccountRowSaysWhereItsClaimsStartAndAFreshMeterReadsThemBack(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	var behind, cold atomic.Int64 // accounts whose claims were read, by either meter
	counted := commands.MeterOptions{OnClaimsRead: func(b, c int) { behind.Add(int64(b)); cold.Add(int64(c)) }}
	s := newStack(t, dbURL, clk, counted)
	id, key := fundedAccount(t, s, 500)
	hash := domain.HashKey(key.APIKey)
	pay := func(s stack, r string, want int64) {
		t.Helper()
		res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource(r))
		if err != nil || res.Credits != want {
			t.Fatalf("%s on %s: %+v %v; want %d credits", r, domain.Day(clk.Now()), res.ChargeDecision, err, want)
		}
	}
	claimsStart := func() (day string, from, firstOfDay int64) {
		t.Helper()
		if err := s.pool.QueryRow(ctx, `SELECT a.claims_day::text, a.claims_from,
				(SELECT min(e.position) FROM events e WHERE e.stream_no = a.stream_no AND e.type = 'RequestCharged'
				 AND e.recorded_at >= a.claims_day::timestamp AT TIME ZONE 'UTC')
			FROM accounts a WHERE a.account_id = $1`, id).Scan(&day, &from, &firstOfDay); err != nil {
			t.Fatal(err)
		}
		return day, from, firstOfDay
	}
	for day := range 3 {
		pay(s, "p1", 1)
		pay(s, "p1", 0)
		pay(s, fmt.Sprint("d", day), 1)
		got, from, first := claimsStart()
		if got != domain.Day(clk.Now()) || from != first {
			t.Fatalf("claims start at %s position %d; want %s position %d (the day's first charge)", got, from, domain.Day(clk.Now()), first)
		}
		clk.Advance(24 * time.Hour)
	}
	clk.Advance(-24 * time.Hour) // the third day
	if behind.Load() != 0 || cold.Load() != 0 {
		t.Fatalf("the meter that charged every day read claims of %d accounts behind and %d cold; want none", behind.Load(), cold.Load())
	}
	fresh := newStack(t, dbURL, clk, counted)
	pay(fresh, "p1", 0)
	pay(fresh, "d2", 0)
	pay(fresh, "d1", 1) // yesterday's claims are not today's
	if behind.Load() != 0 || cold.Load() != 1 {
		t.Fatalf("a fresh meter read claims of %d accounts behind and %d cold; want one cold read, then none", behind.Load(), cold.Load())
	}
	pay(s, "d1", 0) // the first meter reads what the other one charged
	if behind.Load() != 1 || cold.Load() != 1 {
		t.Fatalf("claims read of %d accounts behind; want 1: the first meter's, after the other's charges", behind.Load())
	}
	if l := ledgerOf(t, s, id); l.balance != 1000-7 || !l.consistent() {
		t.Fatalf("ledger %+v; want 7 credits charged", l)
	}
	auditClean(t, s.pool)
}

// A busy account's claims are saved in chunks of 240 as it is charged, so a meter that holds
// nothing of it (a process just started) reads the day's chunks and only the charges after the
// last one, not every charge of the day. Maintenance deletes the chunks of the days before
// yesterday.
func TestABusyAccountsClaimsAreSavedInChunksThatAFreshMeterReads(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	s := newStack(t, dbURL, clk)
	id, key := fundedAccount(t, s, 5000) // 10,000 credits
	hash := domain.HashKey(key.APIKey)
	list := func(from, n int) []string {
		rows := make([]string, n)
		for i := range rows {
			rows[i] = domain.PlaceResource(fmt.Sprint("p", from+i))
		}
		return rows
	}
	for i := 0; i < 600; i += 20 {
		if res, err := s.charge(hash, domain.OpPlaceList, list(i, 20)...); err != nil || res.Credits != 20 {
			t.Fatalf("rows %d-%d: %+v %v", i, i+19, res.ChargeDecision, err)
		}
	}
	var chunks, saved int
	var through int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(length(hashes)) / 8, 0), coalesce(max(through), 0)
		FROM claim_chunks c JOIN accounts a USING (stream_no) WHERE a.account_id = $1 AND c.day = '2026-11-23'`, id).Scan(&chunks, &saved, &through); err != nil {
		t.Fatal(err)
	}
	if chunks != 2 || saved < 480 || saved > 600 {
		t.Fatalf("%d chunks holding %d claims; want 2 chunks of at least 240 of the 600", chunks, saved)
	}
	// A claim only a chunk holds (no charge event has it) shows the fresh meter reads the
	// chunks rather than every charge of the day.
	if _, err := s.pool.Exec(ctx, `INSERT INTO claim_chunks (stream_no, day, through, position, hashes)
		SELECT stream_no, '2026-11-23', $2, 0, int8send($3) FROM accounts WHERE account_id = $1`,
		id, through-1, domain.ResourceHash(domain.PlaceResource("only-in-a-chunk"))); err != nil {
		t.Fatal(err)
	}
	fresh := newStack(t, dbURL, clk)
	res, err := fresh.charge(hash, domain.OpPlaceList, append(list(0, 600), domain.PlaceResource("only-in-a-chunk"), domain.PlaceResource("new"))...)
	if err != nil || res.Credits != 1 || len(res.Deduplicated) != 601 {
		t.Fatalf("the 600, the chunk's claim and a new place from a fresh meter: %+v %v; want only the new one paid", res.ChargeDecision, err)
	}

	// Maintenance keeps yesterday's and today's chunks.
	if _, err := s.pool.Exec(ctx, `INSERT INTO claim_chunks (stream_no, day, through, position, hashes)
		SELECT stream_no, d, 1, 0, '' FROM accounts, unnest('{2026-11-21,2026-11-22}'::date[]) d WHERE account_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, deleted, err := commands.Maintain(ctx, eventstore.New(s.pool), clk.Now()); err != nil || deleted != 1 {
		t.Fatalf("maintenance deleted %d chunks (%v); want the one of 2026-11-21", deleted, err)
	}
	var days []string
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT day::text FROM claim_chunks ORDER BY 1`)
	if err == nil {
		days, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || fmt.Sprint(days) != "[2026-11-22 2026-11-23]" {
		t.Fatalf("chunks of %v (%v); want yesterday's and today's", days, err)
	}
	// The claim planted in the chunk was never paid by a charge: the audit names the chunk that
	// holds it and, replaying the once-a-day rule from the charges, the request it served free,
	// and nothing else.
	var out strings.Builder
	rep, err := audit.Run(ctx, s.pool, audit.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if d := strings.Join(rep.Differences, "\n"); len(rep.Differences) != 2 ||
		!strings.Contains(d, "place:only-in-a-chunk served free (deduplicated)") || !strings.Contains(d, "holds 1 claim of no resource paid by then") {
		t.Fatalf("audit: %s; want the planted claim's chunk and the one request served free on it", out.String())
	}
}

// The Go and SQL forms of a claim's resource hash must agree: the migration that hashed the
// claims (0006) used the SQL one.
func TestTheGoAndSQLResourceHashesAgree(t *testing.T) {
	pool := pgtest.NewPool(t)
	for _, r := range []string{"place:p1", "towns", domain.EventsResource(strings.Repeat("é", 900), "2026-01-01", "2026-02-01"), ""} {
		var got int64
		if err := pool.QueryRow(ctx, `SELECT kyapi_resource_hash($1)`, r).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := domain.ResourceHash(r); got != want {
			t.Fatalf("%q: SQL %d, Go %d", r, got, want)
		}
	}
}

// A revoke's reason is kept only in the event's JSON payload, which PostgreSQL takes with a
// NUL in it: the command refuses it itself, and the key stays as it was.
func TestARevokeReasonWithANULIsRefusedAndTheKeyStaysActive(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	a := newStack(t, dbURL, clk)
	accountID, key := fundedAccount(t, a, 500)
	err := a.accounts.RevokeKey(ctx, accountID, key.KeyID, "leaked\x00", eventstore.Metadata{})
	var invalid *domain.ValidationError
	if !errors.As(err, &invalid) || invalid.Field != "reason" {
		t.Fatalf("revoke with a NUL in its reason: %v, want a validation error on reason", err)
	}
	if _, err := a.charge(domain.HashKey(key.APIKey), domain.OpPlaceDetail, domain.PlaceResource("p1")); err != nil {
		t.Fatalf("the key was refused after the refused revoke: %v", err)
	}
}
