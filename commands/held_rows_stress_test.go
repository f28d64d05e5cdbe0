package commands_test

import (
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// Two processes charge three accounts while a third party keeps taking their rows for a while
// (skipped by kyapi_charge, decided again under a short LockWait). Every answer must match the
// ledger: each 200 is one RequestCharged/Deduplicated event and its credits, each refusal none.
func TestChargesOfAccountsOthersKeepLockingAreAnsweredExactlyAsTheLedger(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	opts := commands.MeterOptions{LockWait: 200 * time.Millisecond, BatchWait: 10 * time.Second}
	p1, p2 := newStack(t, dbURL, clk, opts), newStack(t, dbURL, clk, opts)
	var ids []string
	var keys []commands.IssuedKey
	for range 3 {
		id, k := fundedAccount(t, p1, 500)
		ids, keys = append(ids, id), append(keys, k)
	}
	stop := make(chan struct{})
	var hw sync.WaitGroup
	hw.Add(1)
	go func() { // the holder
		defer hw.Done()
		r := rand.New(rand.NewSource(1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			tx, err := p1.pool.Begin(ctx)
			if err != nil {
				return
			}
			_, _ = tx.Exec(ctx, `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, ids[r.Intn(3)])
			time.Sleep(time.Duration(r.Intn(350)) * time.Millisecond)
			_ = tx.Rollback(ctx)
			time.Sleep(time.Duration(r.Intn(50)) * time.Millisecond)
		}
	}()
	type tally struct{ ok, credits int64 }
	var mu sync.Mutex
	got := map[string]*tally{}
	for _, id := range ids {
		got[id] = &tally{}
	}
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := p1
			if w%2 == 1 {
				s = p2
			}
			r := rand.New(rand.NewSource(int64(w)))
			for range 40 {
				i := r.Intn(3)
				res, err := s.charge(domain.HashKey(keys[i].APIKey), domain.OpPlaceDetail, domain.PlaceResource(fmt.Sprintf("p%d", r.Intn(30))))
				mu.Lock()
				if err == nil {
					got[ids[i]].ok++
					got[ids[i]].credits += res.Credits
				} else if errors.Is(err, domain.ErrOutcomeUnknown) {
					t.Errorf("outcome unknown: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	hw.Wait()
	for _, id := range ids {
		l := ledgerOf(t, p1, id)
		if !l.consistent() || l.charges+l.dedupd != got[id].ok || l.totals.ChargedCredits != got[id].credits {
			t.Errorf("account %s: answered %d ok for %d credits; ledger %d charges + %d dedup for %d credits (consistent %v)",
				id, got[id].ok, got[id].credits, l.charges, l.dedupd, l.totals.ChargedCredits, l.consistent())
		}
		t.Logf("account %s: %d answered ok, %d credits", id, got[id].ok, got[id].credits)
	}
	auditClean(t, p1.pool)
}
