package commands_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

func ptr(n int64) *int64 { return &n }

func TestAnAccountsRateLimitIsAnEventThatMovesNoCreditsAndReachesTheCallerAtOnce(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	accountID, key := fundedAccount(t, s, 500)
	hash := domain.HashKey(key.APIKey)
	if c, err := s.meter.Authenticate(ctx, hash); err != nil || c.RateLimitPerMinute != 0 {
		t.Fatalf("before: caller limit %d, %v; want 0 (the default)", c.RateLimitPerMinute, err)
	}
	if err := s.accounts.SetRateLimit(ctx, accountID, ptr(250), eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if c, err := s.meter.Authenticate(ctx, hash); err != nil || c.RateLimitPerMinute != 250 {
		t.Fatalf("after setting 250: caller limit %d, %v", c.RateLimitPerMinute, err)
	}
	v, err := s.views.Account(ctx, accountID, noon)
	if err != nil || v.RateLimitPerMinute == nil || *v.RateLimitPerMinute != 250 {
		t.Fatalf("account view rate_limit_per_minute %v, %v", v.RateLimitPerMinute, err)
	}
	entries, err := s.views.Ledger(ctx, accountID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-1]
	if last.Type != domain.EventRateLimitSet || last.CreditsDelta != 0 || last.BalanceAfter != 1000 ||
		string(last.Payload) != `{"account_id":"`+accountID+`","balance_after":1000,"credits_delta":0,"requests_per_minute":250}` {
		t.Fatalf("last ledger entry %+v %s", last, last.Payload)
	}

	if err := s.accounts.SetRateLimit(ctx, accountID, nil, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.meter.Authenticate(ctx, hash); c.RateLimitPerMinute != 0 {
		t.Fatalf("after null: caller limit %d, want 0 (the default)", c.RateLimitPerMinute)
	}
	if v, _ := s.views.Account(ctx, accountID, noon); v.RateLimitPerMinute != nil {
		t.Fatalf("after null: account view %d, want null", *v.RateLimitPerMinute)
	}
	var balance int64
	if err := s.pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE account_id = $1`, accountID).Scan(&balance); err != nil || balance != 1000 {
		t.Fatalf("balance %d (%v) after two rate-limit changes, want 1000", balance, err)
	}
}

func TestARateLimitOutOfBoundsOrOfAnUnknownAccountChangesNothing(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	accountID, _ := fundedAccount(t, s, 500)
	for _, n := range []int64{0, -1, 100_001} {
		var v *domain.ValidationError
		if err := s.accounts.SetRateLimit(ctx, accountID, ptr(n), eventstore.Metadata{}); !errors.As(err, &v) || v.Field != "requests_per_minute" {
			t.Errorf("limit %d: %v, want a validation error on requests_per_minute", n, err)
		}
	}
	for _, n := range []int64{1, 100_000} {
		if err := s.accounts.SetRateLimit(ctx, accountID, ptr(n), eventstore.Metadata{}); err != nil {
			t.Errorf("limit %d: %v", n, err)
		}
	}
	if err := s.accounts.SetRateLimit(ctx, "acc_nope", ptr(5), eventstore.Metadata{}); !errors.Is(err, domain.ErrAccountNotFound) {
		t.Errorf("unknown account: %v", err)
	}
	var events int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = 'RateLimitSet'`).Scan(&events); err != nil || events != 2 {
		t.Fatalf("%d RateLimitSet events (%v), want the 2 valid ones", events, err)
	}
}

// Another process learns of the change by the key-change notification: its next request of
// any key of the account carries the new limit, with no restart and no expiry to wait for.
func TestARateLimitSetOnOneProcessReachesTheOthersKeyCache(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	a, b := newStack(t, dbURL, clk), newStack(t, dbURL, clk)
	listenCtx, stop := context.WithCancel(ctx)
	defer stop()
	go b.meter.Keys().Listen(listenCtx, nil)
	accountID, key := fundedAccount(t, a, 500)
	hash := domain.HashKey(key.APIKey)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var listening bool
		_ = a.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %')`).Scan(&listening)
		if listening || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	if c, err := b.meter.Authenticate(ctx, hash); err != nil || c.RateLimitPerMinute != 0 {
		t.Fatalf("b before: %d, %v", c.RateLimitPerMinute, err)
	}
	if err := a.accounts.SetRateLimit(ctx, accountID, ptr(7), eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		c, err := b.meter.Authenticate(ctx, hash)
		if err != nil {
			t.Fatal(err)
		}
		if c.RateLimitPerMinute == 7 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still has limit %d", c.RateLimitPerMinute)
		}
	}
}
