package audit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

var ctx = context.Background()

var noon = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// world is an account with some history, its meter and the database.
type world struct {
	pool     *pgxpool.Pool
	accounts commands.Accounts
	meter    *commands.Meter
	account  string
	caller   commands.Caller
}

func newWorld(t *testing.T, pool *pgxpool.Pool, charges int) world {
	t.Helper()
	store := eventstore.New(pool)
	now := func() time.Time { return noon }
	w := world{pool: pool, accounts: commands.Accounts{Store: store, Clock: now}, meter: commands.NewMeter(store, now, commands.MeterOptions{})}
	t.Cleanup(w.meter.Close)
	var err error
	if w.account, err = w.accounts.OpenAccount(ctx, "Audit Co", "audit@test.example", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	key, _ := w.accounts.IssueKey(ctx, w.account, eventstore.Metadata{})
	if _, err := w.accounts.Purchase(ctx, w.account, 500, "pay-"+w.account, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if w.caller, err = w.meter.Authenticate(ctx, domain.HashKey(key.APIKey)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < charges; i++ {
		w.charge(t, fmt.Sprint("p", i%11))
	}
	return w
}

func (w world) charge(t testing.TB, place string) {
	t.Helper()
	if _, err := w.meter.Charge(ctx, commands.ChargeRequest{Caller: w.caller, Operation: domain.OpPlaceDetail,
		Resources: []string{domain.PlaceResource(place)}}); err != nil {
		t.Fatal(err)
	}
}

// catchUp brings the shared read models up to the store head.
func catchUp(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	for _, a := range projections.SQLAppliers(time.Now) {
		p := projections.SQL{Pool: pool, Applier: a}
		for deadline := time.Now().Add(time.Minute); ; {
			if _, err := projections.CatchUp(ctx, pool, p, 1000, nil); err != nil {
				t.Fatal(err)
			}
			cp, _ := p.Checkpoint(ctx)
			head, _ := eventstore.GlobalHead(ctx, pool)
			if !cp.Less(head) || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond) // another transaction on the cluster holds back xmin
		}
	}
}

func rebuild(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	for _, a := range projections.SQLAppliers(time.Now) {
		if err := (projections.SQL{Pool: pool, Applier: a}).Reset(ctx); err != nil {
			t.Fatal(err)
		}
	}
	catchUp(t, pool)
}

func run(t testing.TB, pool *pgxpool.Pool, opts audit.Options) (audit.Report, string) {
	t.Helper()
	var out strings.Builder
	opts.Out = &out
	rep, err := audit.Run(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep, out.String()
}

// tamper runs SQL behind the application's back, as an insider with superuser would: with
// the append-only triggers switched off for the transaction (session_replication_role).
func tamper(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql, args...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAuditFindsNothingOnAConsistentDatabaseAndEveryAlteredRow(t *testing.T) {
	alterations := []struct{ name, sql, want string }{
		{"balance", `UPDATE rm_balances SET balance = balance + 1`, "balances read model has balance"},
		{"totals", `UPDATE rm_balances SET requests_charged = requests_charged + 1`, "balances read model totals"},
		{"daily credits", `UPDATE rm_account_days SET credits = credits + 2 WHERE kind = 'places.detail'`, `kind "places.detail": daily read model has`},
		{"daily row deleted", `DELETE FROM rm_account_days WHERE kind = 'purchase'`, `kind "purchase": missing from the daily read model`},
		{"write-model balance", `UPDATE accounts SET balance = balance - 1`, "write-model balance"},
		{"write-model totals", `UPDATE accounts SET charged_credits = charged_credits + 5`, "write-model totals"},
	}
	for _, a := range alterations {
		t.Run(a.name, func(t *testing.T) {
			pool := pgtest.NewPool(t)
			w := newWorld(t, pool, 30)
			catchUp(t, pool)
			if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 || rep.Accounts != 1 || rep.Events != 33 {
				t.Fatalf("consistent database: %+v\n%s", rep, out)
			}
			tamper(t, pool, a.sql)
			rep, out := run(t, pool, audit.Options{})
			if len(rep.Differences) == 0 || !strings.Contains(out, a.want) || !strings.Contains(out, w.account) {
				t.Fatalf("altered %s: %s", a.name, out)
			}
			if !strings.HasPrefix(a.name, "write-model") {
				rebuild(t, pool)
				if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
					t.Fatalf("after a rebuild: %s", out)
				}
			}
		})
	}
}

// The daily read model's days are compared as YYYY-MM-DD whatever the database's DateStyle:
// read as plain text under 'SQL, MDY' every row was a difference.
func TestAnAuditUnderAnotherDateStyleIsClean(t *testing.T) {
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET datestyle = ''SQL, MDY''', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	pool.Reset()
	var style string
	if err := pool.QueryRow(ctx, `SHOW datestyle`).Scan(&style); err != nil || style != "SQL, MDY" {
		t.Fatalf("datestyle %q, %v", style, err)
	}
	newWorld(t, pool, 12)
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 || rep.Accounts != 1 {
		t.Fatalf("audit: %+v\n%s", rep, out)
	}
}

// The usage ledger's read model (rm_usage_daily, the input of trending) is compared too: a
// count changed, a row deleted or one no request backs are differences, held in memory or,
// past the audit's bound, in a temporary table. An account's audit does not count it.
func TestAuditComparesTheUsageReadModel(t *testing.T) {
	for _, spill := range []bool{false, true} {
		t.Run(map[bool]string{false: "in memory", true: "spilled"}[spill], func(t *testing.T) {
			if spill {
				t.Cleanup(audit.SetUsageMemoryRows(2))
			}
			pool := pgtest.NewPool(t)
			w := newWorld(t, pool, 30)
			catchUp(t, pool)
			var rows int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM rm_usage_daily`).Scan(&rows); err != nil || rows != 11 {
				t.Fatalf("%d usage rows, %v; want 11 (p0 to p10)", rows, err)
			}
			if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
				t.Fatalf("consistent database: %s", out)
			}
			for _, c := range []struct{ sql, want string }{
				{`UPDATE rm_usage_daily SET requests = requests + 1 WHERE place_id = 'p3'`, "place p3: the usage read model has 4 requests, the ledger 3"},
				{`DELETE FROM rm_usage_daily WHERE place_id = 'p0'`, "place p0: the ledger has 3 metered requests, missing from the usage read model"},
				{`INSERT INTO rm_usage_daily (day, place_id, requests) VALUES ('2026-11-23', 'p99', 5000)`, "place p99: the usage read model has 5000 requests, the ledger none"},
				{`INSERT INTO rm_usage_daily (day, place_id, requests) VALUES ('2026-11-22', 'p1', 7)`, "usage 2026-11-22 place p1: the usage read model has 7 requests, the ledger none"},
			} {
				tamper(t, pool, c.sql)
				rep, out := run(t, pool, audit.Options{})
				if len(rep.Differences) != 1 || !strings.Contains(out, c.want) {
					t.Errorf("%s: %s; want one difference: %s", c.sql, out, c.want)
				}
				if rep, out := run(t, pool, audit.Options{AccountID: w.account}); len(rep.Differences) != 0 {
					t.Errorf("the account's audit: %s", out)
				}
				rebuild(t, pool)
				if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
					t.Fatalf("after a rebuild: %s", out)
				}
			}
		})
	}
}

// The usage counts spill to a temporary table on a connection of the audit's own: taken from
// the pool, it waited for a connection the audit and its workers held (kyapi audit -workers 15
// on the service's 16-connection pool), and the audit never ended.
func TestAnAuditWhoseUsageSpillsWhileItsWorkersHoldThePoolEnds(t *testing.T) {
	t.Cleanup(audit.SetUsageMemoryRows(2))
	url := pgtest.NewDatabase(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for range 8 {
		newWorld(t, pool, 3)
	}
	catchUp(t, pool)

	c, cancel := context.WithTimeout(ctx, 3*time.Minute) // a guard against a hang, not a time limit
	defer cancel()
	// 1 (the audit's snapshot) + 3 workers = the pool's 4 connections; one unit per account
	// stream (SegmentEvents 1), so that workers still hold theirs when the first unit spills.
	rep, err := audit.Run(c, pool, audit.Options{Workers: 3, SegmentEvents: 1})
	if err != nil {
		t.Fatalf("audit with 3 workers on a 4-connection pool: %v (want a clean report)", err)
	}
	if len(rep.Differences) != 0 {
		t.Fatalf("differences: %v", rep.Differences)
	}
}

// Tampering with the events themselves is named by stream, version and position.
func TestAuditNamesEditedMissingAndReorderedEvents(t *testing.T) {
	cases := []struct {
		name string
		sql  string
		want []string
	}{
		{"a payload edited so that the balances still add up",
			`UPDATE events SET payload = replace(payload::text, 'place:p4', 'place:p5')::json WHERE version = 8 AND stream_no = $1`,
			[]string{"v8", "edited"}},
		{"an event in the middle deleted",
			`DELETE FROM events WHERE version = 10 AND stream_no = $1`,
			[]string{"missing: versions 10 to 10"}},
		{"the newest event deleted, its head left alone",
			`DELETE FROM events WHERE version = 33 AND stream_no = $1`,
			[]string{"head says version 33", "write-model totals"}},
		{"a time moved back",
			`UPDATE events SET recorded_at = recorded_at - interval '1 hour' WHERE version = 12 AND stream_no = $1`,
			[]string{"v12", "recorded_at"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool := pgtest.NewPool(t)
			w := newWorld(t, pool, 30)
			catchUp(t, pool)
			tamper(t, pool, c.sql, w.caller.StreamNo)
			rep, out := run(t, pool, audit.Options{})
			if len(rep.Differences) == 0 {
				t.Fatal("the tampered store audits clean")
			}
			for _, want := range c.want {
				if !strings.Contains(out, want) {
					t.Errorf("audit output does not say %q:\n%s", want, out)
				}
			}
		})
	}
}

// Issue: audits under live traffic reported charges that landed between catching up and
// reading the read models. Now every audit reads one snapshot and compares read models as of
// their checkpoints: two processes charge and project all along, and every audit is clean.
func TestAuditsWhileTwoProcessesChargeAreClean(t *testing.T) {
	pools, runCtx, stop := twoProjectingProcesses(t)
	defer stop()
	worlds := []world{newWorld(t, pools[0], 0)}
	// Each process charges its own way through the places: paid, then deduplicated.
	var wg sync.WaitGroup
	var charged atomic.Int64
	for i, p := range pools {
		store := eventstore.New(p)
		meter := commands.NewMeter(store, func() time.Time { return noon }, commands.MeterOptions{})
		t.Cleanup(meter.Close)
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; runCtx.Err() == nil; n++ {
					_, err := meter.Charge(ctx, commands.ChargeRequest{Caller: worlds[0].caller, Operation: domain.OpPlaceDetail,
						Resources: []string{domain.PlaceResource(fmt.Sprintf("%d-%d-%d", i, g, n%300))}})
					if err != nil && runCtx.Err() == nil {
						t.Error(err)
						return
					}
					charged.Add(1)
				}
			}()
		}
	}
	auditsUnderLoad(t, pools[1], &charged, 5, 50, "charges")
	stop()
	wg.Wait()
	// The processes' projections may not have applied a single event yet: a transaction of
	// another test's database on the shared cluster holds back what the gap-free reader sees,
	// and an empty rm_balances leaves the tamper below nothing to change. Catch the read
	// models up (the processes are stopped: nothing applies beside it) so that there is a row.
	catchUp(t, pools[0])
	tamper(t, pools[0], `UPDATE rm_balances SET balance = balance + 7`)
	if rep, out := run(t, pools[1], audit.Options{}); len(rep.Differences) == 0 || !strings.Contains(out, "balances read model has balance") {
		t.Fatalf("a corrupted read-model row after the load: %s", out)
	}
}

// auditsUnderLoad audits the whole store rounds times while the load runs, each time after
// every more facts have been written (written counts them), and fails on any difference.
func auditsUnderLoad(t *testing.T, pool *pgxpool.Pool, written *atomic.Int64, rounds int, every int64, load string) {
	t.Helper()
	for i := range rounds {
		for start := written.Load(); written.Load() < start+every; {
			time.Sleep(5 * time.Millisecond)
		}
		if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
			t.Fatalf("audit %d under %s:\n%s", i+1, load, out)
		}
	}
}

// twoProjectingProcesses is two connection pools on a fresh database, each running every
// projection as a serving process does until stop. stop returns once both have stopped: a
// batch still being applied after it would overwrite what a test then tampers with.
func twoProjectingProcesses(t *testing.T) ([]*pgxpool.Pool, context.Context, func()) {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	runCtx, cancel := context.WithCancel(ctx)
	var runners []*projections.Runner
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			for _, r := range runners {
				if err := r.Close(); err != nil {
					t.Errorf("stopping the projections: %v", err)
				}
			}
		})
	}
	t.Cleanup(stop)
	pools := make([]*pgxpool.Pool, 2)
	for i := range pools {
		p, err := pgxpool.New(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools[i] = p
		runner := &projections.Runner{Pool: p, Projections: projections.All(p, nil, time.Now), Poll: 5 * time.Millisecond}
		if err := runner.Start(runCtx); err != nil {
			t.Fatal(err)
		}
		runners = append(runners, runner)
	}
	return pools, runCtx, stop
}

// The audit stays clean while every kind of fact is written beside it, from two processes:
// charges on one account; purchases, key rotations (each revoking the key still in grace) and
// bonus grants (which credit the charged account too, between its charges) on another.
func TestAuditsWhileAccountsBuyRotateAndAreGrantedAreClean(t *testing.T) {
	pools, runCtx, stop := twoProjectingProcesses(t)
	defer stop()
	w := newWorld(t, pools[0], 0)
	other, err := w.accounts.OpenAccount(ctx, "Busy Co", "busy@test.example", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var facts atomic.Int64
	for i, p := range pools {
		meter := commands.NewMeter(eventstore.New(p), func() time.Time { return noon }, commands.MeterOptions{})
		t.Cleanup(meter.Close)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; runCtx.Err() == nil; n++ {
				_, err := meter.Charge(ctx, commands.ChargeRequest{Caller: w.caller, Operation: domain.OpPlaceDetail,
					Resources: []string{domain.PlaceResource(fmt.Sprintf("%d-%d", i, n%200))}})
				if err != nil && runCtx.Err() == nil && !errors.Is(err, domain.ErrInsufficientCredits) {
					t.Error(err)
					return
				}
				facts.Add(1)
			}
		}()
	}
	accounts := commands.Accounts{Store: eventstore.New(pools[1]), Clock: func() time.Time { return noon }}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; runCtx.Err() == nil; n++ {
			var err error
			switch n % 3 {
			case 0:
				_, err = accounts.Purchase(ctx, other, 500, fmt.Sprint("busy-pay-", n), eventstore.Metadata{})
			case 1:
				_, err = accounts.IssueKey(ctx, other, eventstore.Metadata{})
			case 2:
				_, err = accounts.GrantBonus(ctx, fmt.Sprint("busy-outage-", n), 3, "test", eventstore.Metadata{})
			}
			if err != nil && runCtx.Err() == nil {
				t.Error(err)
				return
			}
			facts.Add(1)
		}
	}()
	auditsUnderLoad(t, pools[1], &facts, 8, 150, "purchases, rotations, grants and charges")
	stop()
	wg.Wait()
	var grants, rotations int
	if err := pools[0].QueryRow(ctx, `SELECT (SELECT count(*) FROM bonus_grants), (SELECT count(*) FROM api_keys WHERE account_id = $1)`,
		other).Scan(&grants, &rotations); err != nil {
		t.Fatal(err)
	}
	if grants == 0 || rotations < 3 {
		t.Fatalf("%d grants and %d keys of the busy account: the load did not run", grants, rotations)
	}
	// The same audit still sees a key set back from revoked after the load.
	tamper(t, pools[0], `UPDATE api_keys SET state = 'active', revoked_at = NULL WHERE key_id =
		(SELECT min(key_id) FROM api_keys WHERE account_id = $1 AND state = 'revoked')`, other)
	if rep, out := run(t, pools[1], audit.Options{}); len(rep.Differences) == 0 || !strings.Contains(out, "api_keys row of key") {
		t.Fatalf("a revoked key set back to active after the load: %s", out)
	}
}

// A long stream audited in segments, in parallel, must give the same answer as one pass, and
// an account or position range can be audited alone.
func TestSegmentedAccountAndRangeAuditsAgreeWithAWholeAudit(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 1200) // marks every 256 events: five segments of 256
	other := newWorld(t, pool, 40)
	catchUp(t, pool)
	whole, out := run(t, pool, audit.Options{})
	if len(whole.Differences) != 0 {
		t.Fatal(out)
	}
	seg, out := run(t, pool, audit.Options{SegmentEvents: 256, Workers: 3})
	if len(seg.Differences) != 0 || seg.Events != whole.Events || seg.Accounts != 2 {
		t.Fatalf("segmented audit %+v, whole %+v:\n%s", seg, whole, out)
	}
	one, out := run(t, pool, audit.Options{AccountID: other.account})
	if len(one.Differences) != 0 || one.Accounts != 1 || one.Events != 43 {
		t.Fatalf("one account: %+v\n%s", one, out)
	}
	var mid int64
	if err := pool.QueryRow(ctx, `SELECT position FROM events WHERE stream_no = $1 AND version = 600`, w.caller.StreamNo).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	part, out := run(t, pool, audit.Options{FromPosition: mid, SegmentEvents: 256})
	if len(part.Differences) != 0 || part.Events != whole.Events-(mid-1) {
		t.Fatalf("from position %d: %+v (whole %d events)\n%s", mid, part, whole.Events, out)
	}
	// An edit inside the range is found by a range audit and a segmented one alike. (The edited
	// charge cites key 2, which was never issued: an audit that reads the stream from its start
	// names that too, at the same version.)
	tamper(t, pool, `UPDATE events SET payload = replace(payload::text, '"k":1', '"k":2')::json WHERE stream_no = $1 AND version = 900`, w.caller.StreamNo)
	for _, opts := range []audit.Options{{FromPosition: mid}, {SegmentEvents: 256, Workers: 2}} {
		rep, out := run(t, pool, opts)
		if len(rep.Differences) == 0 || !strings.Contains(out, "v900 (position") || !strings.Contains(out, "edited") {
			t.Fatalf("%+v: %s", opts, out)
		}
		for _, d := range rep.Differences {
			if !strings.Contains(d, "v900 (position") {
				t.Fatalf("%+v: a difference not of v900: %s", opts, out)
			}
		}
	}
}

// The audit streams: its memory does not grow with the store. Auditing a store whose events
// take several times the bound in memory stays under it.
func TestAnAuditOfAStoreLargerThanItsMemoryBoundStaysUnderIt(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 0)
	// 120,000 events with ~1 KiB payloads: ~120 MB were they held at once.
	padding := strings.Repeat("x", 1000)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		heads, err := eventstore.HeadsByNo(ctx, tx, w.caller.StreamNo)
		if err != nil {
			return err
		}
		for chunk := 0; chunk < 60; chunk++ {
			var b eventstore.Batch
			for i := 0; i < 2000; i++ {
				h := heads[w.caller.StreamNo]
				if _, err := b.Add(h, noon, eventstore.NewEvent{Type: "Note", Payload: map[string]any{"credits_delta": 0, "balance_after": 1000, "pad": padding}}); err != nil {
					return err
				}
			}
			if err := eventstore.Write(ctx, tx, &b); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `SELECT 1`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	const bound = 40 << 20
	var rep audit.Report
	var out string
	grew := heapGrowth(func() { rep, out = run(t, pool, audit.Options{Workers: 2, SegmentEvents: 50_000}) })
	if rep.Events < 120_000 || len(rep.Differences) != 0 {
		t.Fatalf("audit %+v:\n%s", rep, out)
	}
	if grew > bound {
		t.Fatalf("the audit's heap grew by %d MB auditing %d events; want under %d MB", grew>>20, rep.Events, bound>>20)
	}
}

// The audit's memory follows the streams a unit holds, not the store: a store of many small
// streams (a hundred thousand accounts given a bonus, a large catalog) is cut into units of
// a bounded number of streams, so their states and account rows are never all in memory.
func TestAnAuditOfManySmallStreamsKeepsFewOfTheirStatesAtOnce(t *testing.T) {
	pool := pgtest.NewPool(t)
	const streams = 60_000
	ids := make([]string, streams)
	for i := range ids {
		ids[i] = fmt.Sprintf("place-many-%06d", i)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		heads, err := eventstore.OpenHeads(ctx, tx, true, ids...)
		if err != nil {
			return err
		}
		var b eventstore.Batch
		for _, id := range ids {
			if _, err := b.Add(heads[id], noon, eventstore.NewEvent{Type: "Note", Payload: map[string]int{"n": 1}}); err != nil {
				return err
			}
		}
		return eventstore.Write(ctx, tx, &b)
	})
	if err != nil {
		t.Fatal(err)
	}
	// What must stay in memory is the list of streams (about 200 bytes each); a state per
	// stream held for all of them at once took several times that.
	const bound = 48 << 20
	var rep audit.Report
	var out string
	grew := heapGrowth(func() { rep, out = run(t, pool, audit.Options{Workers: 2}) })
	if rep.Streams != streams || rep.Events != streams || len(rep.Differences) != 0 {
		t.Fatalf("audit %+v:\n%s", rep, out)
	}
	if grew > bound {
		t.Fatalf("the audit's heap grew by %d MB auditing %d streams of one event; want under %d MB", grew>>20, streams, bound>>20)
	}
	t.Logf("heap grew by at most %d MB", grew>>20)
}

// heapGrowth runs fn and returns how far the heap in use rose above where it stood before,
// sampled every 2 ms while fn runs.
func heapGrowth(fn func()) int64 {
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		var m runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	fn()
	close(done)
	return int64(peak.Load()) - int64(base.HeapInuse)
}

// Every account row of the write model is backed by its ledger: `kyapi audit` replays every
// ledger and compares it with the models. A row whose stream is not its account stream — here a
// balance of a million credits with no fact behind it — is a difference, named.
func TestAnAccountRowOffItsLedgerIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	newWorld(t, pool, 3)
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("consistent database: %s", out)
	}
	tamper(t, pool, `WITH s AS (INSERT INTO streams (stream_id) VALUES ('ghost') RETURNING stream_no)
		INSERT INTO accounts (account_id, stream_no, name, email, balance, opened_at)
		SELECT 'acc_ghost', stream_no, 'Ghost', 'ghost@test.example', 1000000, now() FROM s`)
	rep, out := run(t, pool, audit.Options{})
	if len(rep.Differences) != 1 || !strings.Contains(out, "account acc_ghost: its row (balance and totals) is on stream ghost, not on its ledger account-acc_ghost") {
		t.Fatalf("an account with balance 1000000 and no ledger audits clean: %+v\n%s", rep, out)
	}
}
