package projections_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

var bg = context.Background()

func fixedClock() time.Time { return time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) }

// activity writes a realistic mix of account facts: accounts, keys, a rotation, a revoke,
// purchases, charges with dedup and a partial list.
func activity(t *testing.T, store *eventstore.Store) []string {
	t.Helper()
	acc := commands.Accounts{Store: store, Clock: fixedClock}
	meter := commands.NewMeter(store, fixedClock, commands.MeterOptions{})
	t.Cleanup(meter.Close)
	var ids []string
	for i := 0; i < 3; i++ {
		id, err := acc.OpenAccount(bg, fmt.Sprint("Co ", i), fmt.Sprintf("c%d@test.example", i), eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		k, err := acc.IssueKey(bg, id, eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Purchase(bg, id, 500, fmt.Sprint("pay-", i), eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
		c, err := meter.Authenticate(bg, domain.HashKey(k.APIKey))
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 20; j++ {
			if _, err := meter.Charge(bg, commands.ChargeRequest{Caller: c, Operation: domain.OpPlaceDetail,
				Resources: []string{domain.PlaceResource(fmt.Sprint("p", j%7))}}); err != nil {
				t.Fatal(err)
			}
		}
		if i == 1 {
			k2, _ := acc.IssueKey(bg, id, eventstore.Metadata{})
			_ = acc.RevokeKey(bg, id, k2.KeyID, "test", eventstore.Metadata{})
		}
	}
	return ids
}

type table struct {
	name, query string
}

var readModels = []table{
	{"rm_balances", `SELECT * FROM rm_balances ORDER BY 1`},
	{"rm_account_days", `SELECT account_id, day::text, kind, count, rows_paid, rows_deduplicated, credits, cents, version, balance_after
		FROM rm_account_days ORDER BY 1, 2, 3`},
	{"rm_usage_daily", `SELECT day::text, place_id, requests FROM rm_usage_daily ORDER BY 1, 2`},
}

func dump(t *testing.T, pool *pgxpool.Pool) map[string][][]any {
	t.Helper()
	out := map[string][][]any{}
	for _, tb := range readModels {
		rows, err := pool.Query(bg, tb.query)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			out[tb.name] = append(out[tb.name], v)
		}
		rows.Close()
	}
	return out
}

func TestProjectionsFollowTheStoreThroughWatermill(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := eventstore.New(pool)
	ps := projections.All(pool, nil, time.Now)
	runner := &projections.Runner{Pool: pool, Projections: ps}
	store.OnAppend = runner.Wake
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	ids := activity(t, store)
	waitCtx, stop := context.WithTimeout(bg, 2*time.Minute)
	defer stop()
	if err := projections.WaitCaughtUp(waitCtx, pool, ps); err != nil {
		t.Fatal(err)
	}
	var balance int64
	if err := pool.QueryRow(bg, `SELECT balance FROM rm_balances WHERE account_id = $1`, ids[0]).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if balance != 1000-7 {
		t.Fatalf("projected balance %d, want 993 (7 distinct places paid)", balance)
	}
	var charged, dedup int64
	_ = pool.QueryRow(bg, `SELECT requests_charged, requests_deduplicated FROM rm_balances WHERE account_id = $1`, ids[1]).Scan(&charged, &dedup)
	if charged != 7 || dedup != 13 {
		t.Fatalf("projected totals: %d charged, %d deduplicated; want 7 and 13", charged, dedup)
	}
	var requests int64
	_ = pool.QueryRow(bg, `SELECT sum(requests) FROM rm_usage_daily`).Scan(&requests)
	if requests != 60 {
		t.Fatalf("usage counted %d detail requests, want 60", requests)
	}
	var detail, purchased, closing int64
	_ = pool.QueryRow(bg, `SELECT
			sum(credits) FILTER (WHERE kind = 'places.detail'), sum(credits) FILTER (WHERE kind = 'purchase'),
			max(balance_after) FILTER (WHERE kind = '')
		FROM rm_account_days WHERE account_id = $1`, ids[0]).Scan(&detail, &purchased, &closing)
	if detail != 7 || purchased != 1000 || closing != balance {
		t.Fatalf("daily sums: detail %d, purchased %d, closing balance %d; want 7, 1000, %d", detail, purchased, closing, balance)
	}
}

// flaky applies part of a batch and then fails, a few times, like a crash mid-batch.
type flaky struct {
	projections.SQLApplier
	failures atomic.Int32
}

func (f *flaky) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	if len(events) > 1 && f.failures.Load() > 0 {
		f.failures.Add(-1)
		if err := f.SQLApplier.Apply(ctx, tx, events[:len(events)/2]); err != nil {
			return err
		}
		return errors.New("injected failure mid-batch")
	}
	return f.SQLApplier.Apply(ctx, tx, events)
}

func TestAProjectionThatFailsMidBatchEndsEqualToARebuildFromZero(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := eventstore.New(pool)
	activity(t, store) // events first, so the projections meet them in big batches

	var ps []projections.Projection
	for _, a := range []projections.SQLApplier{projections.Balances{}, projections.AccountDays{}, projections.Usage{}} {
		f := &flaky{SQLApplier: a}
		f.failures.Store(3)
		ps = append(ps, projections.SQL{Pool: pool, Applier: f})
	}
	runner := &projections.Runner{Pool: pool, Projections: ps, BatchSize: 40}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitCtx, stop := context.WithTimeout(bg, 2*time.Minute)
	defer stop()
	if err := projections.WaitCaughtUp(waitCtx, pool, ps); err != nil {
		t.Fatal(err)
	}
	runner.Close()
	for _, p := range ps {
		if n := p.(projections.SQL).Applier.(*flaky).failures.Load(); n != 0 {
			t.Fatalf("%s: %d injected failures never happened", p.Name(), n)
		}
	}
	afterFaults := dump(t, pool)

	for _, p := range ps {
		sql := p.(projections.SQL)
		sql.Applier = sql.Applier.(*flaky).SQLApplier
		if err := sql.Reset(bg); err != nil {
			t.Fatal(err)
		}
		if _, err := projections.CatchUp(bg, pool, sql, 1000, nil); err != nil {
			t.Fatal(err)
		}
	}
	rebuilt := dump(t, pool)
	if len(rebuilt["rm_account_days"]) == 0 || len(rebuilt["rm_balances"]) != 3 {
		t.Fatal("rebuild produced empty read models")
	}
	if !reflect.DeepEqual(afterFaults, rebuilt) {
		t.Fatalf("read models after faults differ from a rebuild:\nfaults:  %v\nrebuilt: %v", afterFaults, rebuilt)
	}
}

// countingProjection counts the ranges its projection is handed.
type countingProjection struct {
	projections.Projection
	ranges atomic.Int64
}

func (c *countingProjection) Handle(ctx context.Context, from, to eventstore.Position) error {
	c.ranges.Add(1)
	return c.Projection.Handle(ctx, from, to)
}

// Under a steady trickle of commits a projection applies what gathered in one range per
// Runner.Gather, not a transaction per commit: the charges of a loaded server commit a hundred
// times a second, and five projections chasing each one cost PostgreSQL more than the charges.
func TestAProjectionGathersSteadyCommitsIntoFewRanges(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := eventstore.New(pool)
	acc := commands.Accounts{Store: store, Clock: fixedClock}
	id, err := acc.OpenAccount(bg, "Trickle", "t@test.example", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	balances := &countingProjection{Projection: projections.SQL{Pool: pool, Applier: projections.Balances{}}}
	const gather = 400 * time.Millisecond
	runner := &projections.Runner{Pool: pool, Projections: []projections.Projection{balances}, Gather: gather}
	store.OnAppend = runner.Wake
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	start := time.Now()
	const purchases = 40
	for i := range purchases {
		if _, err := acc.Purchase(bg, id, 500, fmt.Sprint("trickle-", i), eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
		store.Appended()
		time.Sleep(10 * time.Millisecond)
	}
	waitCtx, stop := context.WithTimeout(bg, 2*time.Minute)
	defer stop()
	if err := projections.WaitCaughtUp(waitCtx, pool, []projections.Projection{balances}); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	// One range may start at once after each idle spell; otherwise ranges start at least
	// `gather` apart, whatever the machine's speed (a slow machine only means fewer).
	most := int64(elapsed/gather) + 2
	if got := balances.ranges.Load(); got > most {
		t.Fatalf("%d commits over %v were applied in %d ranges, want at most %d (one per %v)", purchases, elapsed, got, most, gather)
	}
	var purchased int64
	if err := pool.QueryRow(bg, `SELECT purchased_credits FROM rm_balances WHERE account_id = $1`, id).Scan(&purchased); err != nil {
		t.Fatal(err)
	}
	if purchased != purchases*domain.CreditsForCents(500) {
		t.Fatalf("projected %d purchased credits, want %d", purchased, purchases*domain.CreditsForCents(500))
	}
}

// A catch-up reads ahead of what it applies (rebuild, and serve before it listens). An event
// committed after a transaction that is still open is not visible to the gap-free reader
// yet: the catch-up waits for it rather than stop short of the head it promised to reach.
func TestACatchUpWaitsForAnEventHeldBackByAnOpenTransaction(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := eventstore.New(pool)
	acc := commands.Accounts{Store: store, Clock: fixedClock}
	id, err := acc.OpenAccount(bg, "Held", "h@test.example", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	open, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(bg)
	if _, err := open.Exec(bg, `SELECT pg_current_xact_id()`); err != nil { // older than the purchase
		t.Fatal(err)
	}
	if _, err := acc.Purchase(bg, id, 500, "held-back", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	balances := projections.SQL{Pool: pool, Applier: projections.Balances{}}
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := projections.CatchUp(ctx, pool, balances, 1, nil)
		done <- result{n, err}
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("the catch-up returned (%d events, %v) while the purchase was still held back", r.n, r.err)
	default:
	}
	if err := open.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.n != 2 {
		t.Fatalf("catch-up applied %d events (%v), want the account's 2", r.n, r.err)
	}
	var purchased int64
	if err := pool.QueryRow(bg, `SELECT purchased_credits FROM rm_balances WHERE account_id = $1`, id).Scan(&purchased); err != nil {
		t.Fatal(err)
	}
	if purchased != domain.CreditsForCents(500) {
		t.Fatalf("projected %d purchased credits, want %d", purchased, domain.CreditsForCents(500))
	}
}

// The account read models run as one Group. A member ahead of the others (here usage, whose
// counts would double, caught up alone part of the way, as a rebuild of one read model leaves
// it) is carried from its own checkpoint: it applies no event twice, the others every event once, and a member
// failing mid-range rolls the whole range back for all. The result is a rebuild's.
func TestAGroupCarriesAMemberAheadOfTheOthersAndEndsEqualToARebuild(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := eventstore.New(pool)
	activity(t, store)
	head, err := eventstore.GlobalHead(bg, pool)
	if err != nil {
		t.Fatal(err)
	}
	usage := projections.SQL{Pool: pool, Applier: projections.Usage{}}
	partway, stop := context.WithCancel(bg)
	_, _ = projections.CatchUp(partway, pool, usage, 10, func(int, eventstore.Position) { stop() })
	stop()
	ahead, err := usage.Checkpoint(bg)
	if err != nil {
		t.Fatal(err)
	}
	if ahead == (eventstore.Position{}) || !ahead.Less(head) {
		t.Fatalf("usage caught up to %v of %v; want part of the way", ahead, head)
	}

	days := &flaky{SQLApplier: projections.AccountDays{}}
	days.failures.Store(2)
	group := projections.Group{Pool: pool, Members: []projections.SQLApplier{projections.Balances{}, days, projections.Usage{}}}
	if at, err := group.Checkpoint(bg); err != nil || at != (eventstore.Position{}) {
		t.Fatalf("group checkpoint %v %v; want its earliest member's, 0", at, err)
	}
	runner := &projections.Runner{Pool: pool, Projections: []projections.Projection{group}, BatchSize: 1000}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitCtx, stopWait := context.WithTimeout(bg, 2*time.Minute)
	defer stopWait()
	if err := projections.WaitCaughtUp(waitCtx, pool, []projections.Projection{group}); err != nil {
		t.Fatal(err)
	}
	runner.Close()
	if n := days.failures.Load(); n != 0 {
		t.Fatalf("%d injected failures never happened", n)
	}
	for _, p := range group.Projections() {
		if at, err := p.Checkpoint(bg); err != nil || at.Less(head) {
			t.Fatalf("%s at %v (%v); want the head %v", p.Name(), at, err, head)
		}
	}
	grouped := dump(t, pool)

	for _, a := range []projections.SQLApplier{projections.Balances{}, projections.AccountDays{}, projections.Usage{}} {
		p := projections.SQL{Pool: pool, Applier: a}
		if err := p.Reset(bg); err != nil {
			t.Fatal(err)
		}
		if _, err := projections.CatchUp(bg, pool, p, 1000, nil); err != nil {
			t.Fatal(err)
		}
	}
	rebuilt := dump(t, pool)
	if len(rebuilt["rm_usage_daily"]) == 0 || len(rebuilt["rm_balances"]) != 3 {
		t.Fatal("rebuild produced empty read models")
	}
	if !reflect.DeepEqual(grouped, rebuilt) {
		t.Fatalf("read models of the group differ from a rebuild:\ngroup:   %v\nrebuilt: %v", grouped, rebuilt)
	}
}

// A rebuild of usage runs in one transaction and sums its ranges in memory before writing
// them (SQL.Rebuild): it must end exactly where applying the ranges one by one ends, whether
// the rows fit its buffer or it writes them several times; and a rebuild that fails midway
// must leave the read model and its checkpoint as they were.
func TestARebuildOfUsageSumsRangesInMemoryAndEndsEqualToOneRangeAtATime(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := eventstore.New(pool)
	activity(t, store)
	usage := projections.SQL{Pool: pool, Applier: projections.Usage{}}
	if _, err := projections.CatchUp(bg, pool, usage, 5, nil); err != nil {
		t.Fatal(err)
	}
	byRange := dump(t, pool)["rm_usage_daily"]
	var total int64
	for _, row := range byRange {
		total += row[len(row)-1].(int64)
	}
	if total != 60 { // activity: 3 accounts, 20 paid place details each
		t.Fatalf("applied range by range, usage counts %d requests, not 60: %v", total, byRange)
	}
	head, err := eventstore.GlobalHead(bg, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int{0, 2} { // 0: the default, every row fits
		if rows > 0 {
			defer projections.SetUsageBufferRows(rows)()
		}
		n, err := usage.Rebuild(bg, 5, nil)
		if err != nil {
			t.Fatal(err)
		}
		if total, _ := eventstore.TotalEvents(bg, pool); int64(n) != total {
			t.Fatalf("buffer of %d rows: the rebuild passed over %d events of %d", rows, n, total)
		}
		if got := dump(t, pool)["rm_usage_daily"]; !reflect.DeepEqual(got, byRange) {
			t.Fatalf("buffer of %d rows: rebuilt %v, range by range %v", rows, got, byRange)
		}
		if at, err := usage.Checkpoint(bg); err != nil || at != head {
			t.Fatalf("buffer of %d rows: checkpoint %v (%v), head %v", rows, at, err, head)
		}
	}

	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if _, err := usage.Rebuild(ctx, 5, func(int, eventstore.Position) { cancel() }); err == nil {
		t.Fatal("a rebuild cancelled after its first range reported no error")
	}
	if got := dump(t, pool)["rm_usage_daily"]; !reflect.DeepEqual(got, byRange) {
		t.Fatalf("a failed rebuild left %v, not %v", got, byRange)
	}
	if at, err := usage.Checkpoint(bg); err != nil || at != head {
		t.Fatalf("a failed rebuild left the checkpoint at %v (%v), not %v", at, err, head)
	}
}
