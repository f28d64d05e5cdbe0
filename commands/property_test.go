package commands_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// Three processes (own pools) × eight goroutines run random metered operations on one
// account over a small set of resources, so dedup collisions and the balance running out
// are both frequent. Whatever the interleaving: the balance never goes below zero, it equals
// the credits bought minus the credits charged, and no resource is paid twice in the day.
func TestRandomConcurrentChargesNeverOverspendOrPayAResourceTwiceADay(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { randomChargeRun(t, seed) })
	}
}

func randomChargeRun(t *testing.T, seed uint64) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	stacks := []stack{newStack(t, dbURL, clk), newStack(t, dbURL, clk), newStack(t, dbURL, clk)}
	accountID, key := fundedAccount(t, stacks[0], 500) // 1,000 credits
	hash := domain.HashKey(key.APIKey)
	// Spend down to 150 credits, less than the operations below would cost, so the
	// balance runs out mid-run.
	warm := make([]string, 850)
	for i := range warm {
		warm[i] = domain.PlaceResource(fmt.Sprint("warm", i))
	}
	if _, err := stacks[0].charge(hash, domain.OpPlaceList, warm...); err != nil {
		t.Fatal(err)
	}
	const start = 150

	type op struct {
		operation domain.Operation
		resources func(r *rand.Rand) []string
	}
	place := func(r *rand.Rand) string { return fmt.Sprint("p", r.IntN(40)) }
	ops := []op{
		{domain.OpPlaceDetail, func(r *rand.Rand) []string { return []string{domain.PlaceResource(place(r))} }},
		{domain.OpPlaceMenu, func(r *rand.Rand) []string { return []string{domain.MenuResource(place(r))} }},
		{domain.OpTowns, func(*rand.Rand) []string { return []string{domain.TownsResource} }},
		{domain.OpEvents, func(r *rand.Rand) []string {
			return []string{domain.EventsResource("", "2026-11-23", fmt.Sprintf("2026-12-%02d", r.IntN(30)+1))}
		}},
		{domain.OpPlaceList, func(r *rand.Rand) []string {
			rows := make([]string, r.IntN(25))
			for i := range rows {
				rows[i] = domain.PlaceResource(place(r))
			}
			return rows
		}},
	}

	var mu sync.Mutex
	var spent int64
	var refused atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 24; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			s := stacks[g%len(stacks)]
			for i := 0; i < 40; i++ {
				o := ops[r.IntN(len(ops))]
				res, err := s.charge(hash, o.operation, o.resources(r)...)
				if errors.Is(err, domain.ErrInsufficientCredits) {
					refused.Add(1)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if res.Balance < 0 || res.Credits != int64(len(res.Paid))*o.operation.Cost() {
					t.Errorf("charge %+v", res)
				}
				mu.Lock()
				spent += res.Credits
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()

	l := ledgerOf(t, stacks[0], accountID)
	if l.balance < 0 || l.balance != start-spent || !l.consistent() {
		t.Fatalf("balance %d (ledger %+v), started at %d, charged %d", l.balance, l, start, spent)
	}
	if refused.Load() == 0 {
		t.Fatal("no charge was refused: the balance never ran out, so overspending was not exercised")
	}
	twice, charged, pairs := paidTwice(t, stacks[0], accountID)
	for _, p := range twice {
		t.Errorf("paid twice on one day: %s", p)
	}
	if charged != spent+850 {
		t.Fatalf("ledger charges %d, clients saw %d", charged, spent)
	}
	if pairs == 0 || spent == 0 {
		t.Fatal("the run charged nothing: the property was not exercised")
	}
	auditClean(t, stacks[0].pool)
}

// paidTwice walks an account's ledger and reports every resource paid twice on one UTC day,
// the credits its charges took and how many (day, resource) pairs were paid.
func paidTwice(t *testing.T, s stack, accountID string) (twice []string, charged int64, pairs int) {
	t.Helper()
	paid := map[string]int{}
	for after := int64(0); ; {
		page, err := s.views.Ledger(context.Background(), accountID, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			after = e.Position
			if e.Type != domain.EventRequestCharged {
				continue
			}
			var c struct{ Paid []string }
			if err := json.Unmarshal(e.Payload, &c); err != nil {
				t.Fatal(err)
			}
			charged -= e.CreditsDelta
			day := domain.Day(e.RecordedAt)
			for _, r := range c.Paid {
				paid[day+" "+r]++
				if paid[day+" "+r] == 2 {
					twice = append(twice, day+" "+r)
				}
			}
		}
	}
	return twice, charged, len(paid)
}
