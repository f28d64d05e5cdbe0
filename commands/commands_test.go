package commands_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

type stack struct {
	accounts commands.Accounts
	charger  commands.Charger
	clock    *clock
}

func newStack(t *testing.T, dbURL string, clk *clock) stack {
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := eventstore.New(pool)
	return stack{
		accounts: commands.Accounts{Store: store, Clock: clk.Now},
		charger:  commands.Charger{Store: store, Clock: clk.Now},
		clock:    clk,
	}
}

var ctx = context.Background()

func fundedAccount(t *testing.T, s stack, cents int64) (string, commands.IssuedKey) {
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

func TestTwoProcessesCharging200TimesAt5CreditsSpendExactly500(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	a, b := newStack(t, dbURL, clk), newStack(t, dbURL, clk)
	accountID := race200ChargesOn500Credits(t, a, b)
	var balance, deltas int64
	var charges int
	pool := a.accounts.Store.Pool
	if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE account_id = $1`, accountID).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum((payload->>'credits_delta')::bigint), 0), count(*) FILTER (WHERE type = 'RequestCharged')
		FROM events WHERE stream_id = $1`, domain.AccountStream(accountID)).Scan(&deltas, &charges); err != nil {
		t.Fatal(err)
	}
	if balance != 0 || deltas != 0 || charges != 101 {
		t.Fatalf("balance %d, sum of ledger deltas %d, charges %d; want 0, 0, 101 (with the spend-down)", balance, deltas, charges)
	}
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
	if res, err := a.charger.Charge(ctx, commands.ChargeRequest{KeyHash: hash, Operation: domain.OpPlaceList, Resources: rows}); err != nil || res.Balance != 500 {
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
			_, err := s.charger.Charge(ctx, commands.ChargeRequest{KeyHash: hash, RequestID: fmt.Sprint("r", i),
				Operation: domain.OpEvents, Resources: []string{domain.EventsResource("berea", "2026-12-01", fmt.Sprintf("2026-12-%02d", i%28+1)) + fmt.Sprint("#", i)}})
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
	req := commands.ChargeRequest{KeyHash: domain.HashKey(key.APIKey), Operation: domain.OpPlaceDetail, Resources: []string{domain.PlaceResource("p1")}}
	first, err := s.charger.Charge(ctx, req)
	if err != nil || first.Credits != 1 {
		t.Fatalf("first: %+v %v", first, err)
	}
	second, err := s.charger.Charge(ctx, req)
	if err != nil || second.Credits != 0 || !second.FullyDeduplicated() || second.Balance != first.Balance {
		t.Fatalf("second: %+v %v", second, err)
	}
	clk.Advance(time.Minute)
	third, err := s.charger.Charge(ctx, req)
	if err != nil || third.Credits != 1 {
		t.Fatalf("after midnight: %+v %v", third, err)
	}
}

func TestRevokedAndExpiredKeysAreRefusedAtOnceEverywhere(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	a, b := newStack(t, dbURL, clk), newStack(t, dbURL, clk)
	accountID, first := fundedAccount(t, a, 500)
	hash1 := domain.HashKey(first.APIKey)
	if _, err := b.charger.Authenticate(ctx, hash1); err != nil {
		t.Fatalf("key issued through a is refused by b: %v", err)
	}
	second, err := a.accounts.IssueKey(ctx, accountID, eventstore.Metadata{})
	if err != nil || second.RotatedKeyID == nil || *second.RotatedKeyID != first.KeyID {
		t.Fatalf("rotation: %+v %v", second, err)
	}
	clk.Advance(24*time.Hour - time.Second)
	if _, err := b.charger.Authenticate(ctx, hash1); err != nil {
		t.Fatalf("grace key refused at 23:59:59: %v", err)
	}
	clk.Advance(time.Second)
	if _, err := b.charger.Authenticate(ctx, hash1); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("grace key at 24:00:00: %v", err)
	}
	hash2 := domain.HashKey(second.APIKey)
	if err := a.accounts.RevokeKey(ctx, accountID, second.KeyID, "compromised", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	_, err = b.charger.Charge(ctx, commands.ChargeRequest{KeyHash: hash2, Operation: domain.OpTowns, Resources: []string{domain.TownsResource}})
	if !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("charge with revoked key: %v", err)
	}
	if _, err := b.charger.Authenticate(ctx, domain.HashKey("svc_live_unknown")); !errors.Is(err, domain.ErrInvalidKey) {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestASecondRotationDuringGraceRevokesTheOlderKeyAtOnce(t *testing.T) {
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	accountID, k1 := fundedAccount(t, s, 0)
	if _, err := s.accounts.IssueKey(ctx, accountID, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.charger.Authenticate(ctx, domain.HashKey(k1.APIKey)); err != nil {
		t.Fatalf("k1 in grace refused: %v", err)
	}
	if _, err := s.accounts.IssueKey(ctx, accountID, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.charger.Authenticate(ctx, domain.HashKey(k1.APIKey)); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("k1 after second rotation: %v", err)
	}
}

func TestAPaymentRefIsCountedOnce(t *testing.T) {
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
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
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
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
	var balance int64
	_ = s.accounts.Store.Pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE account_id = $1`, withKey).Scan(&balance)
	if balance != 100 {
		t.Fatalf("balance %d, want 100", balance)
	}
}
