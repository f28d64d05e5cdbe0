package commands_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A statement's opening and closing balances are balance-at just before its two ends, and
// everything in between is the sum of the ledger entries recorded in the window — on an
// account long enough for its stream marks to bound the reads, over windows that cut
// between marks, start on an event recorded exactly at midnight, or hold nothing.
func TestAStatementEqualsBalanceAtAtBothEndsAndTheLedgerBetween(t *testing.T) {
	start := time.Date(2026, 11, 1, 22, 0, 0, 0, time.UTC)
	clk := &clock{now: start}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	acc, key := fundedAccount(t, s, 2000)
	ops := []domain.Operation{domain.OpPlaceDetail, domain.OpPlaceList, domain.OpPlaceMenu}
	for i := 0; i < 700; i++ {
		clk.Advance(7 * time.Minute)
		if i == 300 {
			// A charge exactly at midnight belongs to the day it opens.
			now := clk.Now()
			clk.Advance(now.Truncate(24 * time.Hour).Add(24 * time.Hour).Sub(now))
		}
		op := ops[i%len(ops)]
		resources := []string{domain.PlaceResource(fmt.Sprint("p", i%97))}
		if op == domain.OpPlaceList {
			resources = append(resources, domain.PlaceResource(fmt.Sprint("q", i%13)))
		}
		if _, err := s.charge(domain.HashKey(key.APIKey), op, resources...); err != nil {
			t.Fatal(err)
		}
		switch i {
		case 200:
			if _, err := s.accounts.Purchase(ctx, acc, 1500, "more", eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
		case 400:
			if _, err := s.accounts.GrantBonus(ctx, "outage-1", 250, "sorry", eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries := allLedger(t, s, acc)
	if len(entries) < 700 {
		t.Fatalf("%d ledger entries", len(entries))
	}
	day := func(d int) time.Time { return time.Date(2026, 11, d, 0, 0, 0, 0, time.UTC) }
	windows := [][2]time.Time{
		{day(1), day(2)}, {day(2), day(3)}, {day(2), day(4)}, {day(3), day(3)},
		{day(1), day(9)}, {day(4), day(5)}, {day(6), day(7)}, {day(7), day(8)},
		{time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), day(1)},
	}
	midnightSeen := false
	for _, w := range windows {
		from, to := w[0], w[1]
		st, err := s.views.Statement(ctx, acc, from, to)
		if err != nil {
			t.Fatal(err)
		}
		opening, _ := s.views.BalanceAt(ctx, acc, from.Add(-time.Microsecond))
		closing, _ := s.views.BalanceAt(ctx, acc, to.Add(-time.Microsecond))
		want := foldLedger(t, entries, from, to)
		want.AccountID, want.From, want.To = acc, from.Format(time.DateOnly), to.Format(time.DateOnly)
		want.OpeningBalance, want.ClosingBalance = opening, closing
		if fmt.Sprint(st) != fmt.Sprint(want) {
			t.Errorf("statement %s..%s:\n got %+v\nwant %+v", want.From, want.To, st, want)
		}
		var deltas int64
		for _, e := range entries {
			if !e.RecordedAt.Before(from) && e.RecordedAt.Before(to) {
				deltas += e.CreditsDelta
				midnightSeen = midnightSeen || e.RecordedAt.Equal(from)
			}
		}
		if st.ClosingBalance-st.OpeningBalance != deltas {
			t.Errorf("statement %s..%s: closing %d - opening %d, but the ledger moved %+d", want.From, want.To, st.ClosingBalance, st.OpeningBalance, deltas)
		}
	}
	if !midnightSeen {
		t.Fatal("no window started on the charge recorded at midnight")
	}
	if _, err := s.views.Statement(ctx, "acc_missing", day(1), day(2)); err != domain.ErrAccountNotFound {
		t.Fatalf("unknown account: %v", err)
	}
}

func allLedger(t *testing.T, s stack, acc string) []commands.LedgerEntry {
	t.Helper()
	var out []commands.LedgerEntry
	after := int64(0)
	for {
		page, err := s.views.Ledger(ctx, acc, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
		after = page[len(page)-1].Position
	}
}

// foldLedger sums the ledger entries recorded in [from, to) as a statement does, from the
// ledger's own JSON rather than from the events.
func foldLedger(t *testing.T, entries []commands.LedgerEntry, from, to time.Time) commands.Statement {
	t.Helper()
	st := commands.Statement{Charges: []commands.StatementCharges{}}
	byOp := map[domain.Operation]int{}
	for _, e := range entries {
		if e.RecordedAt.Before(from) || !e.RecordedAt.Before(to) {
			continue
		}
		var p struct {
			AmountCents  int64            `json:"amount_cents"`
			Operation    domain.Operation `json:"operation"`
			Paid         []string         `json:"paid"`
			Deduplicated []string         `json:"deduplicated"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		switch e.Type {
		case domain.EventCreditsPurchased:
			st.Purchases.Count++
			st.Purchases.Credits += e.CreditsDelta
			st.Purchases.Cents += p.AmountCents
		case domain.EventBonusGranted:
			st.Bonuses.Count++
			st.Bonuses.Credits += e.CreditsDelta
		case domain.EventRequestCharged, domain.EventRequestDeduplicated:
			i, ok := byOp[p.Operation]
			if !ok {
				i = len(st.Charges)
				byOp[p.Operation] = i
				st.Charges = append(st.Charges, commands.StatementCharges{Operation: p.Operation})
			}
			c := &st.Charges[i]
			c.Requests++
			c.PaidRows += int64(len(p.Paid))
			c.DeduplicatedRows += int64(len(p.Deduplicated))
			c.Credits -= e.CreditsDelta
		}
	}
	// Statements list operations in name order.
	for i := range st.Charges {
		for j := i + 1; j < len(st.Charges); j++ {
			if st.Charges[j].Operation < st.Charges[i].Operation {
				st.Charges[i], st.Charges[j] = st.Charges[j], st.Charges[i]
			}
		}
	}
	return st
}
