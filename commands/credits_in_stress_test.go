package commands_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// liveStack is a stack over one database whose clock is the wall clock plus skew: two of them
// are two processes whose clocks disagree a little, as they do.
func liveStack(t *testing.T, dbURL string, skew time.Duration) stack {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := eventstore.New(pool)
	now := func() time.Time { return time.Now().Add(skew) }
	meter := commands.NewMeter(store, now, commands.MeterOptions{})
	t.Cleanup(meter.Close)
	return stack{
		accounts: commands.Accounts{Store: store, Clock: now, KeysChanged: meter.Keys().Forget},
		meter:    meter,
		views:    commands.Views{Pool: pool},
		pool:     pool,
	}
}

// stressKey is a key as the test knows it: its state is changed only under the account's
// test mutex, so the test's model is exact.
type stressKey struct {
	id, apiKey string
	revokedAt  time.Time // when the call that revoked it returned; zero while usable
}

type stressAccount struct {
	mu   sync.Mutex
	id   string
	keys []*stressKey // in issue order; the last is active unless revoked
}

// usable is the account's active key and, if any, its grace key.
func (a *stressAccount) usable() []*stressKey {
	var out []*stressKey
	for _, k := range a.keys {
		if k.revokedAt.IsZero() {
			out = append(out, k)
		}
	}
	return out
}

type chargeRecord struct {
	account  string
	key      *stressKey
	started  time.Time
	op       domain.Operation
	res      commands.ChargeResult
	err      error
	nonEmpty bool
}

type purchaseRecord struct {
	account, ref string
	cents        int64
	res          commands.PurchaseResult
	err          error
}

// Credits enter accounts — purchases (each sent two or three times, as a client whose answer
// was lost retries, from both processes at once), bonus grants to hundreds of accounts (asked
// for from both processes, one cut short and finished by asking again) — while two processes
// charge those accounts and their keys are issued, rotated and revoked. After the run every
// account's balance is its purchases plus its bonuses less its charges, as the ledger says and
// as the admin reads say, each payment is counted once, each grant credits exactly the accounts
// with a usable key at its instant, once each, every paid answer is in the ledger and nothing
// else is, and the audit is clean.
func TestCreditsEnteringWhileTwoProcessesChargeAddUp(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	a := liveStack(t, dbURL, 0)
	b := liveStack(t, dbURL, 3*time.Millisecond) // B's clock runs 3 ms ahead
	stacks := []stack{a, b}

	// 230 accounts with a key (more than one chunk of a grant), 6 without any, 4 whose only
	// key is revoked: only the first 24 are charged.
	const nKeyed, nCharged = 230, 24
	var accounts []*stressAccount
	for i := range nKeyed + 10 {
		s := stacks[i%2]
		id, err := s.accounts.OpenAccount(ctx, fmt.Sprint("Stress ", i), "ops@test.example", eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		acc := &stressAccount{id: id}
		accounts = append(accounts, acc)
		if i >= nKeyed && i < nKeyed+6 {
			continue
		}
		k, err := s.accounts.IssueKey(ctx, id, eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		acc.keys = append(acc.keys, &stressKey{id: k.KeyID, apiKey: k.APIKey})
		if i >= nKeyed+6 {
			if err := s.accounts.RevokeKey(ctx, id, k.KeyID, "", eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
			acc.keys[0].revokedAt = time.Now()
		}
	}

	var (
		mu        sync.Mutex
		charges   []chargeRecord
		purchases []purchaseRecord
		wg        sync.WaitGroup
	)
	places := make([]string, 5000)
	for i := range places {
		places[i] = domain.PlaceResource(fmt.Sprint("p", i))
	}

	// Chargers: four per process.
	for w := range 8 {
		s := stacks[w%2]
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				acc := accounts[rng.IntN(nCharged)]
				acc.mu.Lock()
				keys := slices.Clone(acc.keys)
				acc.mu.Unlock()
				key := keys[len(keys)-1]
				if rng.IntN(6) == 0 {
					key = keys[rng.IntN(len(keys))]
				}
				var op domain.Operation
				var res []string
				switch n := rng.IntN(10); {
				case n < 4:
					op, res = domain.OpPlaceDetail, []string{places[rng.IntN(len(places))]}
				case n < 7:
					op = domain.OpPlaceList
					for range 1 + rng.IntN(40) {
						res = append(res, places[rng.IntN(len(places))])
					}
				case n < 9:
					op, res = domain.OpEvents, []string{domain.EventsResource("berea", "2026-12-01", fmt.Sprintf("2026-12-%02d", 1+rng.IntN(20)))}
				default:
					op, res = domain.OpTowns, []string{domain.TownsResource}
				}
				rec := chargeRecord{account: acc.id, key: key, started: time.Now(), op: op, nonEmpty: len(res) > 0}
				c, err := s.meter.Authenticate(ctx, domain.HashKey(key.apiKey))
				if err == nil {
					rec.res, err = s.meter.Charge(ctx, commands.ChargeRequest{Caller: c, Operation: op, Resources: res})
				}
				rec.err = err
				mu.Lock()
				charges = append(charges, rec)
				mu.Unlock()
			}
		}()
	}

	// Purchasers: each payment is sent once, or two or three times at once from both
	// processes (a client retrying an answer it lost), sometimes to another account by mistake.
	for w := range 2 {
		rng := rand.New(rand.NewPCG(uint64(w), 11))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				acc := accounts[rng.IntN(nCharged)]
				ref := fmt.Sprintf("pay-%d-%d", w, i)
				cents := int64(500 + rng.IntN(100))
				sends := 1 + rng.IntN(3)
				var pw sync.WaitGroup
				for n := range sends {
					target := acc.id
					if n == 2 && rng.IntN(3) == 0 {
						target = accounts[rng.IntN(nCharged)].id // the same reference for another account
					}
					pw.Add(1)
					go func() {
						defer pw.Done()
						res, err := stacks[(w+n)%2].accounts.Purchase(ctx, target, cents, ref, eventstore.Metadata{})
						mu.Lock()
						purchases = append(purchases, purchaseRecord{account: target, ref: ref, cents: cents, res: res, err: err})
						mu.Unlock()
					}()
				}
				pw.Wait()
			}
		}()
	}

	// Key changes: rotations (a second one during grace revokes the grace key) and revokes,
	// on both processes, on the charged accounts and on a few others.
	for w := range 2 {
		s := stacks[w]
		rng := rand.New(rand.NewPCG(uint64(w), 13))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				acc := accounts[rng.IntN(nCharged+20)]
				acc.mu.Lock()
				usable := acc.usable()
				if len(usable) > 0 && rng.IntN(3) == 0 {
					k := usable[rng.IntN(len(usable))]
					if err := s.accounts.RevokeKey(ctx, acc.id, k.id, "stress", eventstore.Metadata{}); err != nil {
						t.Error(err)
					}
					k.revokedAt = time.Now()
					usable = acc.usable()
				}
				if len(usable) == 0 || rng.IntN(3) != 0 {
					issued, err := s.accounts.IssueKey(ctx, acc.id, eventstore.Metadata{})
					if err != nil {
						t.Error(err)
					}
					now := time.Now()
					// A rotation revokes an older grace key at once; the active key enters
					// grace. With no active key nothing is rotated and a grace key keeps its
					// grace (domain.PlanKeyIssue).
					for _, k := range usable {
						if issued.RotatedKeyID != nil && k.id != *issued.RotatedKeyID {
							k.revokedAt = now
						}
					}
					acc.keys = append(acc.keys, &stressKey{id: issued.KeyID, apiKey: issued.APIKey})
				}
				acc.mu.Unlock()
			}
		}()
	}

	// Bonus grants: each asked for from both processes at once; one cut short after its first
	// chunk on A and finished by asking again on B.
	grantErrs := make(chan error, 16)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for g := range 3 {
			outage := fmt.Sprint("outage-", g)
			var gw sync.WaitGroup
			for _, s := range stacks {
				gw.Add(1)
				go func() {
					defer gw.Done()
					if _, err := s.accounts.GrantBonus(ctx, outage, int64(100+g), "stress", eventstore.Metadata{}); err != nil {
						grantErrs <- fmt.Errorf("%s: %w", outage, err)
					}
				}()
			}
			gw.Wait()
		}
		cut, cancel := context.WithCancel(ctx)
		h := a.accounts
		h.GrantProgress = func(commands.BonusGrant) { cancel() }
		if _, err := h.GrantBonus(cut, "outage-cut", 77, "stress", eventstore.Metadata{}); !errors.Is(err, context.Canceled) {
			grantErrs <- fmt.Errorf("the grant cut short: %v", err)
		}
		cancel()
		if g, err := b.accounts.Grant(ctx, "outage-cut"); err != nil || g.State != "running" {
			grantErrs <- fmt.Errorf("the grant cut short after its first chunk: %+v %v, want running", g, err)
		}
		if _, err := b.accounts.GrantBonus(ctx, "outage-cut", 99, "ignored", eventstore.Metadata{}); err != nil {
			grantErrs <- err
		}
	}()
	wg.Wait()
	close(grantErrs)
	for err := range grantErrs {
		t.Error(err)
	}

	checkCreditsAddUp(t, a, accounts, charges, purchases)
	auditClean(t, a.pool)
}

// checkCreditsAddUp checks the books after a stress run (see
// TestCreditsEnteringWhileTwoProcessesChargeAddUp).
func checkCreditsAddUp(t *testing.T, s stack, accounts []*stressAccount, charges []chargeRecord, purchases []purchaseRecord) {
	t.Helper()
	type book struct {
		purchased, bonus, charged int64
		metered                   int64
		refs                      map[string]int64 // payment_ref: credits
		outages                   map[string]int
		paidOn                    map[string]bool // day|resource paid
	}
	books := map[string]*book{}
	for _, acc := range accounts {
		bk := &book{refs: map[string]int64{}, outages: map[string]int{}, paidOn: map[string]bool{}}
		books[acc.id] = bk
		v, err := s.views.Account(ctx, acc.id, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var entries []commands.LedgerEntry
		for after := int64(0); ; {
			page, err := s.views.Ledger(ctx, acc.id, after, 7) // small pages: paging is checked too
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			entries = append(entries, page...)
			after = page[len(page)-1].Position
		}
		var balance int64
		for i, e := range entries {
			if e.Version != int64(i+1) || i > 0 && (e.Position <= entries[i-1].Position || e.RecordedAt.Before(entries[i-1].RecordedAt)) {
				t.Errorf("%s: ledger entry %d out of order: %+v after %+v", acc.id, i, e, entries[max(i-1, 0)])
			}
			balance += e.CreditsDelta
			if e.BalanceAfter != balance || balance < 0 {
				t.Errorf("%s: entry %d (%s) balance_after %d, sum of deltas %d", acc.id, e.Version, e.Type, e.BalanceAfter, balance)
			}
			var p struct {
				PaymentRef string   `json:"payment_ref"`
				OutageID   string   `json:"outage_id"`
				Credits    int64    `json:"credits"`
				Paid       []string `json:"paid"`
			}
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			switch e.Type {
			case domain.EventCreditsPurchased:
				bk.purchased += e.CreditsDelta
				if _, twice := bk.refs[p.PaymentRef]; twice {
					t.Errorf("%s: payment %s credited twice", acc.id, p.PaymentRef)
				}
				bk.refs[p.PaymentRef] = e.CreditsDelta
			case domain.EventBonusGranted:
				bk.bonus += e.CreditsDelta
				bk.outages[p.OutageID]++
			case domain.EventRequestCharged, domain.EventRequestDeduplicated:
				bk.charged -= e.CreditsDelta
				bk.metered++
				day := e.RecordedAt.UTC().Format(time.DateOnly)
				for _, r := range p.Paid {
					if bk.paidOn[day+"|"+r] {
						t.Errorf("%s: %s paid twice on %s", acc.id, r, day)
					}
					bk.paidOn[day+"|"+r] = true
				}
			default:
				if e.CreditsDelta != 0 {
					t.Errorf("%s: %s moves %d credits", acc.id, e.Type, e.CreditsDelta)
				}
			}
		}
		tot := v.Totals
		if v.Balance != balance || bk.purchased+bk.bonus-bk.charged != balance ||
			tot.PurchasedCredits != bk.purchased || tot.BonusCredits != bk.bonus || tot.ChargedCredits != bk.charged {
			t.Errorf("%s: account balance %d totals %+v; ledger balance %d, purchased %d, bonus %d, charged %d",
				acc.id, v.Balance, tot, balance, bk.purchased, bk.bonus, bk.charged)
		}
		// balance-at agrees with the ledger at each fact's instant and just before it.
		for i, e := range entries {
			if i+1 < len(entries) && entries[i+1].RecordedAt.Equal(e.RecordedAt) {
				continue
			}
			want := map[time.Time]int64{e.RecordedAt: e.BalanceAfter, e.RecordedAt.Add(-time.Microsecond): 0}
			for j := i; j >= 0; j-- {
				if entries[j].RecordedAt.Before(e.RecordedAt) {
					want[e.RecordedAt.Add(-time.Microsecond)] = entries[j].BalanceAfter
					break
				}
			}
			for at, w := range want {
				got, err := s.views.BalanceAt(ctx, acc.id, at)
				if err != nil || got != w {
					t.Errorf("%s: balance-at %s = %d (%v), the ledger says %d", acc.id, at.Format(time.RFC3339Nano), got, err, w)
				}
			}
		}
	}

	// Payments: each reference credited once, to the account of its first answer, with the
	// credits every successful answer reports; a reference used for another account refused.
	byRef := map[string][]purchaseRecord{}
	for _, p := range purchases {
		byRef[p.ref] = append(byRef[p.ref], p)
	}
	for ref, ps := range byRef {
		firsts := 0
		for _, p := range ps {
			switch {
			case p.err == nil && !p.res.Replayed:
				firsts++
			case p.err == nil:
			case errors.Is(p.err, domain.ErrPaymentRefReused):
			default:
				t.Errorf("purchase %s for %s: %v", ref, p.account, p.err)
			}
		}
		credited := 0
		for _, bk := range books {
			if _, ok := bk.refs[ref]; ok {
				credited++
			}
		}
		if firsts != 1 || credited != 1 {
			t.Errorf("payment %s: %d first answers, credited to %d accounts; want 1 and 1: %+v", ref, firsts, credited, ps)
		}
		for _, p := range ps {
			credits, ok := books[p.account].refs[ref]
			switch {
			case p.err == nil && (!ok || credits != p.res.CreditsAdded || credits != domain.CreditsForCents(p.cents) && !p.res.Replayed):
				t.Errorf("payment %s answered %+v for %s; its ledger holds %d (%v)", ref, p.res, p.account, credits, ok)
			case errors.Is(p.err, domain.ErrPaymentRefReused) && ok:
				t.Errorf("payment %s refused for %s as used elsewhere, but credited to it", ref, p.account)
			}
		}
	}

	// Grants: every account with a key usable at the grant's instant credited once, no other.
	rows, err := s.pool.Query(ctx, `SELECT g.outage_id, g.credits, g.accounts, g.state,
			coalesce(array_agg(DISTINCT k.account_id) FILTER (WHERE k.account_id IS NOT NULL), '{}')
		FROM bonus_grants g LEFT JOIN api_keys k ON k.issued_at <= g.granted_at
			AND (k.revoked_at IS NULL OR k.revoked_at > g.granted_at) AND (k.grace_until IS NULL OR k.grace_until > g.granted_at)
		GROUP BY g.outage_id, g.credits, g.accounts, g.state`)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		outage, state string
		credits       int64
		accounts      int
		eligible      []string
	}
	var grants []grant
	for rows.Next() {
		var g grant
		if err := rows.Scan(&g.outage, &g.credits, &g.accounts, &g.state, &g.eligible); err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	if rows.Err() != nil || len(grants) != 4 {
		t.Fatalf("grants: %v %+v", rows.Err(), grants)
	}
	for _, g := range grants {
		if g.state != "done" || g.accounts != len(g.eligible) || g.accounts < 200 {
			t.Errorf("grant %s: %+v, %d accounts eligible", g.outage, g, len(g.eligible))
		}
		for id, bk := range books {
			want := 0
			if slices.Contains(g.eligible, id) {
				want = 1
			}
			if bk.outages[g.outage] != want {
				t.Errorf("grant %s credited %s %d times, want %d", g.outage, id, bk.outages[g.outage], want)
			}
		}
	}

	// Charges: every paid answer is in the ledger and nothing else is; no charge started
	// after its key's revoke returned went through.
	answered := map[string]int64{}
	served := map[string]int64{}
	for _, c := range charges {
		var ic *domain.InsufficientCreditsError
		switch {
		case c.err == nil:
			answered[c.account] += c.res.Credits
			if c.nonEmpty {
				served[c.account]++
			}
			if !c.key.revokedAt.IsZero() && c.started.After(c.key.revokedAt) {
				t.Errorf("%s: a charge started %s after its key was revoked was served", c.account, c.started.Sub(c.key.revokedAt))
			}
		case errors.As(c.err, &ic), errors.Is(c.err, domain.ErrKeyRevoked), errors.Is(c.err, domain.ErrInsufficientCredits):
		default:
			t.Errorf("%s: charge: %v", c.account, c.err)
		}
	}
	var nOK, n402, n403, nFirst int
	for _, c := range charges {
		var ic *domain.InsufficientCreditsError
		switch {
		case c.err == nil:
			nOK++
		case errors.As(c.err, &ic):
			n402++
		default:
			n403++
		}
	}
	for _, p := range purchases {
		if p.err == nil && !p.res.Replayed {
			nFirst++
		}
	}
	t.Logf("charges: %d served, %d refused for credits, %d refused for the key; %d purchase calls, %d first answers", nOK, n402, n403, len(purchases), nFirst)
	for id, bk := range books {
		if answered[id] != bk.charged || served[id] != bk.metered {
			t.Errorf("%s: answers charged %d credits in %d requests; the ledger %d in %d", id, answered[id], served[id], bk.charged, bk.metered)
		}
	}
}
