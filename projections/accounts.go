package projections

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// accountFact is an account event as the account projections read it.
type accountFact struct {
	accountID  string
	version    int64
	recordedAt time.Time
	domain.AccountFact
}

// accountFacts decodes the account events among events, in order.
func accountFacts(events []eventstore.Event) ([]accountFact, error) {
	out := make([]accountFact, 0, len(events))
	for _, e := range events {
		id := domain.AccountOfStream(e.StreamID)
		if id == "" {
			continue
		}
		f, err := domain.DecodeAccountFact(e.Type, e.Payload)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", e.Position, err)
		}
		out = append(out, accountFact{accountID: id, version: e.Version, recordedAt: e.RecordedAt, AccountFact: f})
	}
	return out, nil
}

// factsApplier is an account read model that applies decoded account facts: a Group of them
// decodes each range once for all of them.
type factsApplier interface {
	applyFacts(ctx context.Context, tx pgx.Tx, facts []accountFact) error
}

// applyDecoded applies events to an account read model, decoding them first.
func applyDecoded(ctx context.Context, tx pgx.Tx, m factsApplier, events []eventstore.Event) error {
	facts, err := accountFacts(events)
	if err != nil {
		return err
	}
	return m.applyFacts(ctx, tx, facts)
}

// Balances keeps each account's balance (version-guarded: a later version that arrives first
// is kept) and its totals (sums, so commutative). The audit compares both with the write model.
type Balances struct{}

func (Balances) Name() string         { return "balances" }
func (Balances) EventTypes() []string { return domain.AccountEventTypes }

// accountSums are the totals one batch adds to an account.
type accountSums struct {
	balance, version int64
	domain.AccountTotals
}

func (s *accountSums) add(f accountFact) {
	if f.version > s.version {
		s.balance, s.version = f.BalanceAfter, f.version
	}
	s.AccountTotals.Add(f.AccountFact)
}

func (b Balances) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	return applyDecoded(ctx, tx, b, events)
}

func (Balances) applyFacts(ctx context.Context, tx pgx.Tx, facts []accountFact) error {
	sums := map[string]*accountSums{}
	var ids []string
	for _, f := range facts {
		s := sums[f.accountID]
		if s == nil {
			s = &accountSums{}
			sums[f.accountID] = s
			ids = append(ids, f.accountID)
		}
		s.add(f)
	}
	if len(ids) == 0 {
		return nil
	}
	n := len(ids)
	cols := make([][]int64, 7)
	for i := range cols {
		cols[i] = make([]int64, n)
	}
	for i, id := range ids {
		s := sums[id]
		for j, v := range []int64{s.balance, s.version, s.PurchasedCredits, s.BonusCredits, s.ChargedCredits, s.RequestsCharged, s.RequestsDeduplicated} {
			cols[j][i] = v
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO rm_balances AS r (account_id, balance, version, purchased_credits, bonus_credits,
			charged_credits, requests_charged, requests_deduplicated)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[])
		ON CONFLICT (account_id) DO UPDATE SET
			balance = CASE WHEN r.version < EXCLUDED.version THEN EXCLUDED.balance ELSE r.balance END,
			version = greatest(r.version, EXCLUDED.version),
			purchased_credits = r.purchased_credits + EXCLUDED.purchased_credits,
			bonus_credits = r.bonus_credits + EXCLUDED.bonus_credits,
			charged_credits = r.charged_credits + EXCLUDED.charged_credits,
			requests_charged = r.requests_charged + EXCLUDED.requests_charged,
			requests_deduplicated = r.requests_deduplicated + EXCLUDED.requests_deduplicated`,
		ids, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6])
	return err
}

func (Balances) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE rm_balances`)
	return err
}

// AccountDays sums each account's UTC days per kind of fact (rm_account_days): purchases,
// bonuses and each metered operation, plus the day's closing balance. Statements and the
// console read a row per day instead of every event. Sums are commutative and the closing
// balance is version-guarded, so events may arrive in any order.
type AccountDays struct{}

func (AccountDays) Name() string         { return "account_days" }
func (AccountDays) EventTypes() []string { return domain.AccountEventTypes }

// dayKey is one row of rm_account_days.
type dayKey struct{ account, day, kind string }

type daySums struct {
	domain.DayFigures
	version, balanceAfter int64 // on the "" row: the day's newest event and its balance_after
}

func (d AccountDays) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	return applyDecoded(ctx, tx, d, events)
}

func (AccountDays) applyFacts(ctx context.Context, tx pgx.Tx, facts []accountFact) error {
	sums := map[dayKey]*daySums{}
	var keys []dayKey
	get := func(k dayKey) *daySums {
		s := sums[k]
		if s == nil {
			s = &daySums{}
			sums[k] = s
			keys = append(keys, k)
		}
		return s
	}
	for _, f := range facts {
		day := domain.Day(f.recordedAt)
		closing := get(dayKey{f.accountID, day, ""})
		if f.version > closing.version {
			closing.version, closing.balanceAfter = f.version, f.BalanceAfter
		}
		kind := f.DayKind()
		if kind == "" {
			continue
		}
		get(dayKey{f.accountID, day, kind}).Add(f.AccountFact)
	}
	if len(keys) == 0 {
		return nil
	}
	n := len(keys)
	accounts, days, kinds := make([]string, n), make([]string, n), make([]string, n)
	cols := make([][]int64, 7)
	for i := range cols {
		cols[i] = make([]int64, n)
	}
	for i, k := range keys {
		s := sums[k]
		accounts[i], days[i], kinds[i] = k.account, k.day, k.kind
		for j, v := range []int64{s.Count, s.RowsPaid, s.RowsDeduplicated, s.Credits, s.Cents, s.version, s.balanceAfter} {
			cols[j][i] = v
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO rm_account_days AS r (account_id, day, kind, count, rows_paid, rows_deduplicated,
			credits, cents, version, balance_after)
		SELECT a, d::date, k, c, rp, rd, cr, ce, v, b
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[],
			$9::bigint[], $10::bigint[]) AS u(a, d, k, c, rp, rd, cr, ce, v, b)
		ON CONFLICT (account_id, day, kind) DO UPDATE SET
			count = r.count + EXCLUDED.count,
			rows_paid = r.rows_paid + EXCLUDED.rows_paid,
			rows_deduplicated = r.rows_deduplicated + EXCLUDED.rows_deduplicated,
			credits = r.credits + EXCLUDED.credits,
			cents = r.cents + EXCLUDED.cents,
			balance_after = CASE WHEN r.version < EXCLUDED.version THEN EXCLUDED.balance_after ELSE r.balance_after END,
			version = greatest(r.version, EXCLUDED.version)`,
		accounts, days, kinds, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6])
	return err
}

func (AccountDays) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE rm_account_days`)
	return err
}

// Usage counts metered requests per place and UTC day (detail, menu, reviews, related),
// charged or deduplicated: the input of trending.
type Usage struct{}

func (Usage) Name() string { return "usage" }

// EventTypes are the metered requests: usage counts nothing else.
func (Usage) EventTypes() []string {
	return []string{domain.EventRequestCharged, domain.EventRequestDeduplicated}
}

func (u Usage) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	return applyDecoded(ctx, tx, u, events)
}

func (Usage) applyFacts(ctx context.Context, tx pgx.Tx, facts []accountFact) error {
	c := usageCounts{}
	c.add(facts)
	return c.write(ctx, tx)
}

// usageBufferRows bounds the rows a rebuild of usage sums in memory before it writes them
// (about 100 bytes each). A variable for the tests.
var usageBufferRows = 500_000

// rebuildBuffer sums a rebuild's ranges per day and place: a place requested on a day in
// many ranges is written once, not once per range.
func (Usage) rebuildBuffer() rangeBuffer { return &usageBuffer{counts: usageCounts{}} }

type usageBuffer struct{ counts usageCounts }

func (b *usageBuffer) add(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	facts, err := accountFacts(events)
	if err != nil {
		return err
	}
	b.counts.add(facts)
	if len(b.counts) < usageBufferRows {
		return nil
	}
	return b.flush(ctx, tx)
}

func (b *usageBuffer) flush(ctx context.Context, tx pgx.Tx) error {
	err := b.counts.write(ctx, tx)
	b.counts = usageCounts{}
	return err
}

// usageCounts are metered requests per UTC day and place.
type usageCounts map[[2]string]int64

func (c usageCounts) add(facts []accountFact) {
	for _, f := range facts {
		if !f.Metered() || !f.Operation.UsageCounted() {
			continue
		}
		day := domain.Day(f.recordedAt)
		for _, r := range append(f.Paid, f.Deduplicated...) {
			if id := domain.PlaceOfResource(r); id != "" {
				c[[2]string{day, id}]++
			}
		}
	}
}

// write adds the counts to rm_usage_daily.
func (c usageCounts) write(ctx context.Context, tx pgx.Tx) error {
	if len(c) == 0 {
		return nil
	}
	// In key order: the rows land in the primary key's order, page after page, instead of
	// at random (a map's order) all over it.
	keys := slices.SortedFunc(maps.Keys(c), func(a, b [2]string) int {
		return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
	})
	days, places, n := make([]string, len(keys)), make([]string, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		days[i], places[i], n[i] = k[0], k[1], c[k]
	}
	_, err := tx.Exec(ctx, `INSERT INTO rm_usage_daily (day, place_id, requests)
		SELECT d::date, p, c FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(d, p, c)
		ON CONFLICT (day, place_id) DO UPDATE SET requests = rm_usage_daily.requests + EXCLUDED.requests`, days, places, n)
	return err
}

func (Usage) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE rm_usage_daily`)
	return err
}
