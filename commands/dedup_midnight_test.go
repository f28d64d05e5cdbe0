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

// Random charges from several processes with tiny caches (claims and account states evicted all
// the time) and two or three lanes, on busy accounts whose claims spill into chunks, with a
// process restarting, clocks 1.5 s apart and UTC midnight passing mid-run: no resource is paid
// twice on a UTC day, every ledger adds up and never goes below zero, and the audit is clean.
func TestRandomChargesWithTinyCachesRestartsAndMidnightPayEachResourceOnceADay(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { randomChargesAcrossMidnight(t, seed) })
	}
}

func randomChargesAcrossMidnight(t *testing.T, seed uint64) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: time.Date(2026, 11, 23, 23, 59, 59, 0, time.UTC)}
	opts := func(i int) commands.MeterOptions {
		switch i % 3 {
		case 0:
			return commands.MeterOptions{MaxClaims: 300, MaxAccounts: 2}
		case 1:
			return commands.MeterOptions{MaxClaims: 5000, MaxAccounts: 1, Workers: 3}
		default:
			return commands.MeterOptions{}
		}
	}
	var smu sync.Mutex
	ahead, behind := &clock{now: clk.Now().Add(1500 * time.Millisecond)}, &clock{now: clk.Now().Add(-1500 * time.Millisecond)}
	stacks := []stack{newStack(t, dbURL, clk, opts(0)), newStack(t, dbURL, ahead, opts(1)), newStack(t, dbURL, behind, opts(2))}
	type acct struct {
		id   string
		hash domain.KeyHash
	}
	var accts []acct
	for range 4 {
		id, key := fundedAccount(t, stacks[0], 2_500_000)
		accts = append(accts, acct{id, domain.HashKey(key.APIKey)})
	}
	place := func(r *rand.Rand) string { return domain.PlaceResource(fmt.Sprint("p", r.IntN(700))) }
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// Midnight passes slowly during the run.
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				clk.Advance(5 * time.Millisecond)
				ahead.Advance(5 * time.Millisecond)
				behind.Advance(5 * time.Millisecond)
			}
		}
	}()
	restarts := 0
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			for i := 0; i < 60; i++ {
				smu.Lock()
				if g == 0 && i == 30 {
					// Midnight passes for every process by now, whatever the pace of the run.
					for _, c := range []*clock{clk, ahead, behind} {
						c.Advance(2 * time.Second)
					}
				}
				if g == 0 && i%15 == 14 {
					// A process restarts: a fresh meter (its caches empty).
					restarts++
					stacks[1] = newStack(t, dbURL, ahead, opts(restarts))
				}
				s := stacks[r.IntN(len(stacks))]
				smu.Unlock()
				a := accts[r.IntN(len(accts))]
				var err error
				if r.IntN(3) == 0 {
					_, err = s.charge(a.hash, domain.OpPlaceDetail, place(r))
				} else {
					rows := make([]string, 1+r.IntN(40))
					for j := range rows {
						rows[j] = place(r)
					}
					_, err = s.charge(a.hash, domain.OpPlaceList, rows...)
				}
				if err != nil && !errors.Is(err, domain.ErrInsufficientCredits) {
					t.Error(err)
					return
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
		if l := ledgerOf(t, stacks[0], a.id); l.balance < 0 || !l.consistent() {
			t.Errorf("account %s: ledger %+v", a.id, l)
		}
	}
	var chunks, days int
	if err := stacks[0].pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM claim_chunks), (SELECT count(DISTINCT (recorded_at AT TIME ZONE 'UTC')::date) FROM events WHERE type = 'RequestCharged')`).Scan(&chunks, &days); err != nil {
		t.Fatal(err)
	}
	if chunks == 0 || days < 2 {
		t.Fatalf("%d claim chunks saved, charges on %d UTC days: the run did not cover what it is for", chunks, days)
	}
	auditClean(t, stacks[0].pool)
}

// A meter that holds nothing of an account (another process, or a restart) reads the day of
// its newest charges from accounts.claims_day, as YYYY-MM-DD whatever the database's
// DateStyle: read as plain text under 'SQL, MDY' it was 11/23/2026, never today's day, so
// no claim was read and a resource already paid today was charged again.
func TestAResourcePaidTodayIsFreeOnAnotherProcessWhateverTheDateStyle(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	a := newStack(t, dbURL, clk)
	var name string
	if err := a.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if _, err := a.pool.Exec(ctx, `ALTER DATABASE `+name+` SET datestyle = 'SQL, MDY'`); err != nil {
		t.Fatal(err)
	}
	a.pool.Reset() // new sessions take the database's DateStyle
	id, key := fundedAccount(t, a, 500)
	hash := domain.HashKey(key.APIKey)
	mustCharge(t, a, hash, "p1", 1)

	// A second process, sharing the database, that holds nothing of the account.
	b := newStack(t, dbURL, clk)
	res, err := b.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Credits != 0 || !res.FullyDeduplicated() {
		t.Errorf("p1 again the same day on another process: %d credits, deduplicated %v; want it free", res.Credits, res.FullyDeduplicated())
	}
	if l := ledgerOf(t, b, id); l.balance != 999 {
		t.Errorf("balance %d; want 999 (p1 paid once today)", l.balance)
	}
}
