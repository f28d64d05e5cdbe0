package commands_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// Random charges from three processes, with batches cut after COMMIT is sent or before the
// writes, tiny caches, chunks and midnight: no resource paid twice a UTC day.
func TestThreeProcessesWithLostBatchesPayEachResourceOncePerDay(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: time.Date(2026, 11, 23, 23, 59, 58, 0, time.UTC)}
	var rmu sync.Mutex
	rr := rand.New(rand.NewPCG(7, 7))
	roll := func(n int) bool { rmu.Lock(); defer rmu.Unlock(); return rr.IntN(n) == 0 }
	hooks := commands.MeterHooks{
		BeforeWrite: func(cut func()) {
			if roll(12) {
				cut()
			}
		},
		AfterCommitSent: func(pid uint32, cut func()) {
			if roll(8) {
				cut()
			}
		},
	}
	opts := []commands.MeterOptions{
		{MaxClaims: 250, MaxAccounts: 2, Hooks: hooks},
		{MaxClaims: 3000, Workers: 3, Hooks: hooks},
		{Hooks: hooks},
	}
	stacks := []stack{newStack(t, dbURL, clk, opts[0]), newStack(t, dbURL, clk, opts[1]), newStack(t, dbURL, clk, opts[2])}
	type acct struct {
		id   string
		hash domain.KeyHash
	}
	var accts []acct
	for range 3 {
		id, key := fundedAccount(t, stacks[0], 2_500_000)
		accts = append(accts, acct{id, domain.HashKey(key.APIKey)})
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				clk.Advance(3 * time.Millisecond)
			}
		}
	}()
	var smu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 10; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 99))
			for i := 0; i < 60; i++ {
				smu.Lock()
				if g == 0 && i%20 == 19 {
					stacks[1] = newStack(t, dbURL, clk, opts[1])
				}
				s := stacks[r.IntN(len(stacks))]
				smu.Unlock()
				a := accts[r.IntN(len(accts))]
				rows := make([]string, 1+r.IntN(40))
				for j := range rows {
					rows[j] = domain.PlaceResource(fmt.Sprint("p", r.IntN(600)))
				}
				_, err := s.charge(a.hash, domain.OpPlaceList, rows...)
				if err != nil && !errors.Is(err, domain.ErrUnavailable) && !errors.Is(err, domain.ErrOutcomeUnknown) {
					t.Log(err)
				}
			}
		}(g)
	}
	wg.Wait()
	close(stop)
	for _, a := range accts {
		twice, _, _ := paidTwice(t, stacks[0], a.id)
		if len(twice) > 0 {
			t.Errorf("account %s: %d resources paid twice the same day, e.g. %v", a.id, len(twice), twice[:min(5, len(twice))])
		}
		if l := ledgerOf(t, stacks[0], a.id); !l.consistent() {
			t.Errorf("account %s: ledger %+v", a.id, l)
		}
	}
	var chunks, days int
	if err := stacks[0].pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM claim_chunks), (SELECT count(DISTINCT (recorded_at AT TIME ZONE 'UTC')::date) FROM events WHERE type = 'RequestCharged')`).Scan(&chunks, &days); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d chunks, %d days", chunks, days)
}
