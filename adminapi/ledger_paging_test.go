package adminapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
)

// balance-at and ledger paging across several stream marks (every 256th event), with many
// facts sharing one instant, checked at every fact's instant and 1 µs before it.
func TestBalanceAtAndLedgerPagingAcrossStreamMarks(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	acc := f.openAccount("Many Facts") // version 1 at t0, balance 0
	accounts := commands.Accounts{Store: eventstore.New(f.pool), Clock: f.clock.Now}
	type fact struct {
		at      time.Time
		balance int64
	}
	facts := []fact{{t0, 0}}
	var balance int64
	for i := range 700 {
		if i%3 != 0 {
			f.clock.Advance(time.Second + 7*time.Microsecond)
		}
		res, err := accounts.Purchase(ctx, acc, 500+int64(i), fmt.Sprintf("marks-%d", i), eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		balance += 2 * (500 + int64(i))
		if res.Balance != balance {
			t.Fatalf("purchase %d: balance %d, want %d", i, res.Balance, balance)
		}
		facts = append(facts, fact{f.clock.Now().UTC().Truncate(time.Microsecond), balance})
	}
	want := func(at time.Time) int64 {
		var b int64
		for _, x := range facts {
			if !x.at.After(at) {
				b = x.balance
			}
		}
		return b
	}
	seen := map[time.Time]bool{}
	for _, x := range facts {
		if seen[x.at] {
			continue
		}
		seen[x.at] = true
		for _, at := range []time.Time{x.at, x.at.Add(-time.Microsecond), x.at.Add(-time.Nanosecond), x.at.Add(999 * time.Nanosecond)} {
			r := f.call("GET", "/admin/accounts/"+acc+"/balance-at?at="+at.Format(time.RFC3339Nano), "")
			f.expect(r, 200, "")
			if got := num(r.data()["balance"]); got != want(at) {
				t.Errorf("balance-at %s: %d, want %d", at.Format(time.RFC3339Nano), got, want(at))
			}
		}
	}
	for _, limit := range []int{1000, 256, 7, 1} {
		var after int64
		var n int
		var prevVersion int64
		for {
			r := f.call("GET", fmt.Sprintf("/admin/accounts/%s/ledger?limit=%d&after=%d", acc, limit, after), "")
			f.expect(r, 200, "")
			rows := r.body["data"].([]any)
			if len(rows) == 0 {
				if r.body["next_after"] != nil {
					t.Errorf("empty page with next_after %v", r.body["next_after"])
				}
				break
			}
			for _, row := range rows {
				row := row.(map[string]any)
				v := num(row["version"])
				if v != prevVersion+1 {
					t.Fatalf("limit %d: version %d after %d", limit, v, prevVersion)
				}
				prevVersion = v
				if got := num(row["balance_after"]); got != facts[v-1].balance {
					t.Errorf("limit %d: version %d balance_after %d, want %d", limit, v, got, facts[v-1].balance)
				}
				n++
			}
			after = num(r.body["next_after"])
		}
		if n != len(facts) {
			t.Errorf("limit %d: %d entries, want %d", limit, n, len(facts))
		}
	}
}
