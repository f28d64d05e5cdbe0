package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// growthResult is the growth benchmark: one account's history at each size, and what the
// operators' reads and the audit cost there.
type growthResult struct {
	AccountID string `json:"account_id"`
	// The reference: an account with the smallest size's history, opened beside it; its
	// reads ("ref_" + the read's name) are timed with the growing account's at every size,
	// in the same store, so that a ratio of the two leaves out what the store's growth and
	// the machine's moods do to both.
	ReferenceID     string       `json:"reference_id"`
	ReferenceEvents int64        `json:"reference_events"`
	Reps            int          `json:"reps"`
	Steps           []growthStep `json:"steps"`
}

type growthStep struct {
	Events        int64             `json:"events"`         // events of the account's stream
	StoreEvents   int64             `json:"store_events"`   // events of the whole store
	AppendS       float64           `json:"append_s"`       // writing this step's new events
	AppendRate    float64           `json:"append_per_s"`   // events/s of that
	CatchUpS      float64           `json:"catch_up_s"`     // projections catching up after it
	VacuumS       float64           `json:"vacuum_s"`       // VACUUM (ANALYZE) of the tables it wrote, then CHECKPOINT
	DatabaseBytes int64             `json:"database_bytes"` // pg_database_size after the step
	Reads         map[string]timed  `json:"reads"`
	Audit         auditRun          `json:"audit"`
	Explain       map[string]string `json:"explain,omitempty"`
}

// timed is one read repeated: latencies over HTTP, in milliseconds.
type timed struct {
	P50ms  float64 `json:"p50_ms"`
	P90ms  float64 `json:"p90_ms"`
	MaxMs  float64 `json:"max_ms"`
	Status int     `json:"status"`
	Path   string  `json:"path"`
}

type auditRun struct {
	Seconds      float64 `json:"seconds"`
	Events       int64   `json:"events"`
	EventsPerSec float64 `json:"events_per_s"`
	PeakRSSMB    float64 `json:"peak_rss_mb"`
	Summary      string  `json:"summary"`
	Clean        bool    `json:"clean"`
	Error        string  `json:"error,omitempty"`
}

// The growth account's history runs from historyStart for historySpan, its events evenly
// spaced: balance-at an "early instant" asks for a time a fixed number of events in.
const (
	historySpan        = 30 * 24 * time.Hour
	growthChunk        = 10000
	creditsPerPurchase = domain.MaxPurchaseCents * 2 // CreditsForCents(MaxPurchaseCents)
)

func runGrowth(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("growth", flag.ContinueOnError)
	sizesFlag := fs.String("sizes", "10000,100000,1000000,10000000", "events of the account at each step, increasing")
	adminURL := fs.String("admin-url", "", "admin API of a running kyapi serve on this database")
	token := fs.String("admin-token", os.Getenv("ADMIN_TOKEN"), "admin token")
	kyapi := fs.String("kyapi", "kyapi", "kyapi binary, for kyapi audit")
	reps := fs.Int("reps", 30, "times each read is timed at each size")
	out := fs.String("out", "-", "JSON file to write (rewritten after every step)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var sizes []int64
	for s := range strings.SplitSeq(*sizesFlag, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < 100 || (len(sizes) > 0 && n <= sizes[len(sizes)-1]) {
			return fmt.Errorf("-sizes: %q is not an increasing list of sizes of at least 100", *sizesFlag)
		}
		sizes = append(sizes, n)
	}
	if *adminURL == "" {
		return errors.New("-admin-url is required")
	}
	pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := eventstore.New(pool)

	largest := sizes[len(sizes)-1]
	start := time.Now().UTC().Add(-historySpan - time.Hour).Truncate(time.Second)
	spacing := historySpan / time.Duration(largest)
	// Opened, keyed and paid for through the commands, at the start of its history.
	clock := func() time.Time { return start }
	acc := commands.Accounts{Store: store, Clock: clock}
	meta := eventstore.Metadata{Actor: "storebench"}
	id, err := acc.OpenAccount(ctx, "Growth benchmark", "growth@bench.example", meta)
	if err != nil {
		return err
	}
	if _, err := acc.IssueKey(ctx, id, meta); err != nil {
		return err
	}
	for i := int64(0); i*creditsPerPurchase < largest; i++ {
		if _, err := acc.Purchase(ctx, id, domain.MaxPurchaseCents, fmt.Sprintf("growth-%s-%d", id, i), meta); err != nil {
			return err
		}
	}
	// The reference account: the same opening, and the smallest size's history, spread
	// over the same span at the same spacing, so the early instant lies in it too.
	refID, err := acc.OpenAccount(ctx, "Growth reference", "growth-reference@bench.example", meta)
	if err != nil {
		return err
	}
	if _, err := acc.IssueKey(ctx, refID, meta); err != nil {
		return err
	}
	if _, err := acc.Purchase(ctx, refID, domain.MaxPurchaseCents, "growth-reference-"+refID, meta); err != nil {
		return err
	}
	for charged := int64(0); charged < sizes[0]; {
		n := min(growthChunk, sizes[0]-charged)
		if err := appendCharges(ctx, store, refID, charged, n, start.Add(time.Minute), spacing); err != nil {
			return err
		}
		charged += n
	}
	var refEvents, refLastAfter int64
	if err := pool.QueryRow(ctx, `SELECT s.version FROM streams s JOIN accounts a USING (stream_no) WHERE a.account_id = $1`, refID).Scan(&refEvents); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, `SELECT e.position FROM events e JOIN accounts a USING (stream_no)
		WHERE a.account_id = $1 ORDER BY e.position DESC OFFSET 100 LIMIT 1`, refID).Scan(&refLastAfter); err != nil {
		return err
	}
	var base int64 // events before the charges: opened, key, purchases
	if err := pool.QueryRow(ctx, `SELECT s.version FROM streams s JOIN accounts a USING (stream_no) WHERE a.account_id = $1`, id).Scan(&base); err != nil {
		return err
	}
	// balance-at asks for an instant between two charges early in the history, the same
	// instant at every size.
	early := min(5000, sizes[0]/2)
	earlyAt := start.Add(time.Minute + time.Duration(early)*spacing + spacing/2)

	res := growthResult{AccountID: id, ReferenceID: refID, ReferenceEvents: refEvents, Reps: *reps}
	fmt.Printf("growth: account %s, sizes %v\n", id, sizes)
	var charged int64
	for _, size := range sizes {
		step := growthStep{Reads: map[string]timed{}}
		t0 := time.Now()
		before := charged
		want := size - base
		for charged < want {
			n := min(growthChunk, want-charged)
			if err := appendCharges(ctx, store, id, charged, n, start.Add(time.Minute), spacing); err != nil {
				return err
			}
			charged += n
		}
		step.AppendS = time.Since(t0).Seconds()
		step.Events = base + charged
		step.AppendRate = float64(charged-before) / step.AppendS
		t1 := time.Now()
		if err := caughtUp(ctx, pool, 30*time.Minute); err != nil {
			return err
		}
		step.CatchUpS = time.Since(t1).Seconds()
		// The reads are timed on a store at rest: vacuumed and analyzed, so that no autovacuum
		// run the append set off shares the two cores with them, and checkpointed, so that no
		// checkpoint writing out what the append and the vacuum dirtied does either. What that
		// costs is reported beside them.
		t2 := time.Now()
		if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) events, streams, stream_marks, accounts`); err != nil {
			return fmt.Errorf("vacuum at %d events: %w", size, err)
		}
		if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
			return fmt.Errorf("checkpoint at %d events: %w", size, err)
		}
		step.VacuumS = time.Since(t2).Seconds()
		if step.StoreEvents, err = eventstore.TotalEvents(ctx, pool); err != nil {
			return err
		}
		if err := pool.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&step.DatabaseBytes); err != nil {
			return err
		}
		// The last page starts after the event 100 from the end.
		var lastAfter int64
		if err := pool.QueryRow(ctx, `SELECT e.position FROM events e JOIN accounts a USING (stream_no)
			WHERE a.account_id = $1 ORDER BY e.position DESC OFFSET 100 LIMIT 1`, id).Scan(&lastAfter); err != nil {
			return err
		}
		readsOf := func(prefix, id string, lastAfter int64) []growthRead {
			acctURL := strings.TrimRight(*adminURL, "/") + "/admin/accounts/" + id
			return []growthRead{
				{prefix + "account", acctURL},
				{prefix + "balance_at_early", acctURL + "/balance-at?at=" + url.QueryEscape(earlyAt.Format(time.RFC3339Nano))},
				{prefix + "ledger_first", acctURL + "/ledger?limit=100"},
				{prefix + "ledger_last", acctURL + "/ledger?limit=100&after=" + strconv.FormatInt(lastAfter, 10)},
			}
		}
		reads := append(readsOf("", id, lastAfter), readsOf("ref_", refID, refLastAfter)...)
		if step.Reads, err = timeReads(ctx, reads, *token, *reps); err != nil {
			return fmt.Errorf("reads at %d events: %w", size, err)
		}
		step.Explain = explainReads(ctx, pool, id, earlyAt, lastAfter)
		step.Audit = runAudit(ctx, *kyapi)
		fmt.Printf("growth %d events: appended in %.1fs (%.0f/s), caught up in %.1fs, vacuumed in %.1fs; account %.2f ms, balance-at %.2f ms, ledger first %.2f ms, last %.2f ms; audit %.1fs %.0f events/s %.0f MB %s\n",
			step.Events, step.AppendS, step.AppendRate, step.CatchUpS, step.VacuumS, step.Reads["account"].P50ms, step.Reads["balance_at_early"].P50ms,
			step.Reads["ledger_first"].P50ms, step.Reads["ledger_last"].P50ms, step.Audit.Seconds, step.Audit.EventsPerSec, step.Audit.PeakRSSMB, step.Audit.Summary)
		res.Steps = append(res.Steps, step)
		if err := writeJSON(*out, res); err != nil {
			return err
		}
	}
	return nil
}

// appendCharges appends n charges of one credit each to the account — a place list paying one
// row, each row a place not paid before (no same-day repeat, which the audit would report;
// list rows do not count towards trending, so the history adds no usage row per event) — charges
// from+1 … from+n of its history, in one transaction that locks the account row (as the
// meter does), appends through eventstore.Batch and moves the account's balance, totals and
// claims_day/claims_from.
func appendCharges(ctx context.Context, store *eventstore.Store, id string, from, n int64, t0 time.Time, spacing time.Duration) error {
	return store.WithTx(ctx, func(tx pgx.Tx) error {
		var no int32
		var balance int64
		if err := tx.QueryRow(ctx, `SELECT stream_no, balance FROM accounts WHERE account_id = $1 FOR UPDATE`, id).Scan(&no, &balance); err != nil {
			return err
		}
		heads, err := eventstore.HeadsByNo(ctx, tx, no)
		if err != nil {
			return err
		}
		after := heads[no].Position // Add does not move it
		var b eventstore.Batch
		for i := from + 1; i <= from+n; i++ {
			balance--
			want := t0.Add(time.Duration(i) * spacing).UTC().Truncate(time.Microsecond)
			at, err := b.Add(heads[no], want, eventstore.NewEvent{Type: domain.EventRequestCharged,
				Payload: domain.RequestCharged{KeyNo: 1, Operation: domain.OpPlaceList, Paid: []string{domain.PlaceResource("growth-" + strconv.FormatInt(i, 10))},
					CreditsDelta: -1, BalanceAfter: balance}})
			if err != nil {
				return err
			}
			// The store records an event no earlier than its stream's newest one: a history
			// moved later than asked would put every charge at one instant, and balance-at
			// "an early instant" would read an account with no charges yet.
			if !at.Equal(want) {
				return fmt.Errorf("growth: charge %d of %s is recorded at %s, not at %s: the account has an event later than its history (a key issued after a bonus grant is recorded after the grant's instant; write the history before any grant)",
					i, id, at.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
			}
		}
		if err := eventstore.Write(ctx, tx, &b); err != nil {
			return err
		}
		// claims_day and claims_from, as the meter moves them: the day of the newest charge and
		// the position of its first charge that day, which is in this batch unless the day
		// already was the account's (the batch's charges are in time order).
		day := t0.Add(time.Duration(from+n) * spacing).UTC().Truncate(24 * time.Hour)
		_, err = tx.Exec(ctx, `UPDATE accounts SET balance = $2, charged_credits = charged_credits + $3, requests_charged = requests_charged + $3,
			claims_from = CASE WHEN claims_day = ($4::timestamptz AT TIME ZONE 'UTC')::date THEN claims_from ELSE
				(SELECT min(position) FROM events WHERE stream_no = $5 AND position > $6 AND recorded_at >= $4) END,
			claims_day = ($4::timestamptz AT TIME ZONE 'UTC')::date
			WHERE account_id = $1`, id, balance, n, day, no, after)
		return err
	})
}

// timeReads sends each read reps times (after two untimed rounds) and returns their
// latencies by name. The reads take turns, one GET of each per round, so a burst of other
// work on the shared machine (a checkpoint, another process) slows all of them alike
// instead of whichever read happened to be running.
func timeReads(ctx context.Context, reads []growthRead, token string, reps int) (map[string]timed, error) {
	lat := make([][]float64, len(reads))
	for round := range reps + 2 {
		for i, r := range reads {
			d, err := sendRead(ctx, r.url, token)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
			if round >= 2 {
				lat[i] = append(lat[i], d)
			}
		}
	}
	out := make(map[string]timed, len(reads))
	for i, r := range reads {
		l := lat[i]
		slices.Sort(l)
		out[r.name] = timed{Path: strings.SplitN(r.url, "/admin/", 2)[1], Status: http.StatusOK,
			P50ms: l[len(l)/2], P90ms: l[len(l)*9/10], MaxMs: l[len(l)-1]}
	}
	return out, nil
}

// growthRead is one admin read the growth benchmark times.
type growthRead struct{ name, url string }

// sendRead sends one GET and returns its milliseconds; any answer but 200 is an error.
func sendRead(ctx context.Context, u, token string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := float64(time.Since(t0).Microseconds()) / 1000
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s: %s", u, resp.Status, bytes.TrimSpace(body))
	}
	return d, nil
}

var auditLine = regexp.MustCompile(`audited (\d+) accounts, (\d+) streams, (\d+) events: (\d+) differences`)

// runAudit runs `kyapi audit` over the whole store and measures its time and peak memory.
func runAudit(ctx context.Context, kyapi string) auditRun {
	var a auditRun
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kyapi, "audit")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	a.Seconds = time.Since(t0).Seconds()
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			a.PeakRSSMB = float64(ru.Maxrss) / 1024 // kilobytes on Linux
		}
	}
	if m := auditLine.FindStringSubmatch(stdout.String()); m != nil {
		a.Summary = m[0]
		a.Events, _ = strconv.ParseInt(m[3], 10, 64)
		a.Clean = m[4] == "0"
		a.EventsPerSec = float64(a.Events) / a.Seconds
	}
	if err != nil {
		tail := strings.TrimSpace(stdout.String() + "\n" + stderr.String())
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		a.Error = err.Error() + ": " + tail
	}
	return a
}

// explainReads is EXPLAIN ANALYZE of the store queries behind the timed reads (the statements
// eventstore runs), so a read that grows with the history shows why.
func explainReads(ctx context.Context, pool *pgxpool.Pool, id string, at time.Time, lastAfter int64) map[string]string {
	stream := domain.AccountStream(id)
	queries := map[string]struct {
		settings, sql string
		args          []any
	}{
		"ledger_first":     {eventstore.StreamPageSettings, eventstore.StreamPageSQL, []any{stream, int64(0), 100}},
		"ledger_last":      {eventstore.StreamPageSettings, eventstore.StreamPageSQL, []any{stream, lastAfter, 100}},
		"balance_at_early": {"", eventstore.LastAtSQL, []any{stream, at, int64(math.MaxInt64)}},
	}
	out := map[string]string{}
	for name, q := range queries {
		lines, err := explain(ctx, pool, q.settings, q.sql, q.args)
		if err != nil {
			out[name] = err.Error()
			continue
		}
		out[name] = strings.Join(lines, "\n")
	}
	return out
}

// explain is EXPLAIN ANALYZE of sql in a transaction that applies settings first, as the
// statement's reader does.
func explain(ctx context.Context, pool *pgxpool.Pool, settings, sql string, args []any) ([]string, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if settings != "" {
		if _, err := tx.Exec(ctx, settings); err != nil {
			return nil, err
		}
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) `+sql, args...)
	if err != nil {
		return nil, err
	}
	var lines []string
	for rows.Next() {
		var l string
		if rows.Scan(&l) == nil {
			lines = append(lines, l)
		}
	}
	rows.Close()
	return lines, rows.Err()
}
