package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The figures bench/storebench writes (see its package comment).

type sizeSnapshot struct {
	Label         string      `json:"label"`
	DatabaseBytes int64       `json:"database_bytes"`
	Events        int64       `json:"events"`
	Tables        []tableSize `json:"tables"`
	CatchUpError  string      `json:"catch_up_error"`
	// What a charge event's row occupies in a page (bench/storebench size).
	ChargeEvents   int64   `json:"charge_events"`
	ChargeRowBytes float64 `json:"charge_row_bytes"`
}

type tableSize struct {
	Name       string `json:"name"`
	TableBytes int64  `json:"table_bytes"`
	IndexBytes int64  `json:"index_bytes"`
	Partitions int    `json:"partitions"`
}

type grantCheck struct {
	State       string  `json:"state"`
	DurationS   float64 `json:"duration_s"`
	Eligible    int64   `json:"eligible"`
	Reported    int64   `json:"reported"`
	Events      int64   `json:"events"`
	Credited    int64   `json:"credited"`
	Missing     int64   `json:"missing"`
	Ineligible  int64   `json:"ineligible"`
	WrongAmount int64   `json:"wrong_amount"`
	Exact       bool    `json:"exact"`
}

type grantRun struct {
	OutageID   string  `json:"outage_id"`
	AtS        float64 `json:"at_s"`
	DoneS      float64 `json:"done_s"`
	PostStatus int     `json:"post_status"`
	PostMs     float64 `json:"post_ms"`
	Accounts   int     `json:"accounts"`
	State      string  `json:"state"`
	ServerS    float64 `json:"server_s"`
	Error      string  `json:"error"`
}

type growthResult struct {
	AccountID       string       `json:"account_id"`
	ReferenceID     string       `json:"reference_id"`
	ReferenceEvents int64        `json:"reference_events"`
	Reps            int          `json:"reps"`
	Steps           []growthStep `json:"steps"`
}

type growthStep struct {
	Events        int64             `json:"events"`
	StoreEvents   int64             `json:"store_events"`
	AppendS       float64           `json:"append_s"`
	AppendRate    float64           `json:"append_per_s"`
	CatchUpS      float64           `json:"catch_up_s"`
	VacuumS       float64           `json:"vacuum_s"`
	DatabaseBytes int64             `json:"database_bytes"`
	Reads         map[string]timed  `json:"reads"`
	Audit         auditRun          `json:"audit"`
	Explain       map[string]string `json:"explain"`
}

type timed struct {
	P50ms float64 `json:"p50_ms"`
	P90ms float64 `json:"p90_ms"`
	MaxMs float64 `json:"max_ms"`
	Path  string  `json:"path"`
}

type auditRun struct {
	Seconds      float64 `json:"seconds"`
	Events       int64   `json:"events"`
	EventsPerSec float64 `json:"events_per_s"`
	PeakRSSMB    float64 `json:"peak_rss_mb"`
	Summary      string  `json:"summary"`
	Clean        bool    `json:"clean"`
	Error        string  `json:"error"`
}

func (r *report) json(name string, v any) bool {
	b, err := os.ReadFile(filepath.Join(r.dir, name))
	return err == nil && json.Unmarshal(b, v) == nil
}

// bytesPerRequest is the database growth of the metered runs, per request served.
func (r *report) bytesPerRequest(md, mm *loadRun) {
	var before, after sizeSnapshot
	if !r.json("size-before.json", &before) || !r.json("size-after.json", &after) {
		return
	}
	var served int
	var labels []string
	for _, l := range []*loadRun{md, mm} {
		if l != nil {
			served += l.Overall.Status["200"]
			labels = append(labels, l.Label)
		}
	}
	if served == 0 {
		return
	}
	growth := after.DatabaseBytes - before.DatabaseBytes
	events := after.Events - before.Events
	perReq := float64(growth) / float64(served)
	r.p("## Bytes per metered request")
	r.p("")
	r.p("`pg_database_size` of the benchmark database before and after the metered runs (%s), each", strings.Join(labels, " and "))
	r.p("taken with every projection caught up and after a `CHECKPOINT` (`bench/storebench size`), divided by")
	r.p("the metered requests served (answered 200) in between: %s requests, which appended %s events.", thousands(float64(served)), thousands(float64(events)))
	for _, s := range []sizeSnapshot{before, after} {
		if s.CatchUpError != "" {
			r.p("The %s snapshot was taken before the projections caught up: %s.", s.Label, s.CatchUpError)
		}
	}
	r.p("")
	r.p("**%.0f bytes per metered request** (%s bytes of growth; %.0f bytes per event appended).", perReq, thousands(float64(growth)), float64(growth)/float64(max(events, 1)))
	r.p("")
	r.p("Where the bytes went (tables with their TOAST, free-space and visibility maps; indexes apart;")
	r.p("PostgreSQL grows files a page (8 kB) at a time, so small tables show steps):")
	r.p("")
	r.p("| table | heap growth | index growth | bytes per request | share |")
	r.p("|---|---:|---:|---:|---:|")
	old := map[string]tableSize{}
	for _, t := range before.Tables {
		old[t.Name] = t
	}
	type row struct {
		name      string
		heap, idx int64
	}
	var rows []row
	var listed int64
	for _, t := range after.Tables {
		o := old[t.Name]
		d := row{name: t.Name, heap: t.TableBytes - o.TableBytes, idx: t.IndexBytes - o.IndexBytes}
		if d.heap == 0 && d.idx == 0 {
			continue
		}
		switch {
		case t.Name == "events":
			d.name = fmt.Sprintf("events (%d partitions)", t.Partitions)
		case strings.HasPrefix(t.Name, "rm_"):
			d.name = t.Name + " (read model)"
		}
		rows = append(rows, d)
		listed += d.heap + d.idx
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].heap+rows[i].idx > rows[j].heap+rows[j].idx })
	share := func(b int64) string {
		if growth == 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(b)/float64(growth))
	}
	for _, d := range rows {
		r.p("| %s | %s | %s | %.0f | %s |", d.name, thousands(float64(d.heap)), thousands(float64(d.idx)), float64(d.heap+d.idx)/float64(served), share(d.heap+d.idx))
	}
	if rest := growth - listed; rest != 0 {
		r.p("| outside these tables (catalogs, sequences, files not yet in a table) | %s | | %.0f | %s |", thousands(float64(rest)), float64(rest)/float64(served), share(rest))
	}
	r.p("")
	var bounded int64
	var boundedNames []string
	for _, d := range rows {
		name := strings.Fields(d.name)[0]
		if why, ok := boundedByDay[name]; ok {
			bounded += d.heap + d.idx
			boundedNames = append(boundedNames, fmt.Sprintf("`%s` (%s)", name, why))
		}
	}
	kept := float64(growth-bounded) / float64(served)
	for _, t := range after.Tables {
		if o := old[t.Name]; t.Name == "events" && events > 0 {
			heap, idx := t.TableBytes-o.TableBytes, t.IndexBytes-o.IndexBytes
			r.p("Each event cost %.0f bytes in the events table (%.0f heap, %.0f in its two indexes): every row carries", float64(heap+idx)/float64(events), float64(heap)/float64(events), float64(idx)/float64(events))
			r.p("PostgreSQL's 24-byte tuple header and 4-byte line pointer, the 32-byte SHA-256 of the chain, its position,")
			r.p("transaction id, version, time and stream number (36 bytes), the type name, the compact JSON payload and")
			r.p("the metadata. Dedup claims take no row: they are the charge events' `paid` rows, which the meter keeps in memory.")
			r.p("")
			if after.ChargeRowBytes > 0 {
				perEventHeap := float64(heap) / float64(events)
				row := after.ChargeRowBytes + 4 // and its line pointer
				r.p("A charge event's row is %.0f bytes by its columns (`pg_column_size`, averaged over the store's %s", after.ChargeRowBytes, thousands(float64(after.ChargeEvents)))
				r.p("charge events), %.0f with its line pointer.", row)
				if row > perEventHeap {
					extra := (row - perEventHeap) * float64(events) / float64(served)
					r.p("The heap grew by less per event because new rows also went into space left free in pages")
					r.p("written before (the catalog import's large rows leave part of each page empty); once that space")
					r.p("is used, each event takes its whole row: counted so, a metered request costs about **%.0f bytes**", perReq+extra)
					r.p("during the run and %.0f that stay, %.0f more than measured here.", kept+extra, extra)
				}
				r.p("")
			}
		}
	}
	// What stays: the tables whose size follows the day, not the requests, left out (above).
	if len(boundedNames) > 0 {
		r.p("Not every byte stays. %s hold a bounded number of rows per day however many requests the day", strings.Join(boundedNames, ", "))
		r.p("has (in a short run nearly every request adds one; over a day they stop growing), or only the last two")
		r.p("days' rows. Without them, **%.0f bytes per metered request stay** in the database (events, accounts,", kept)
		r.p("balances): that is the figure that multiplies with traffic over months.")
		r.p("")
	}
	r.check("database growth per metered request (during the run, every table)", "≤ 400 bytes", perReq, 400, false, "bytes")
	r.check("database growth per metered request that stays (tables bounded by the day left out)", "≤ 400 bytes", kept, 400, false, "bytes")
}

// boundedByDay are the tables whose rows are bounded by the day, not by the requests, or kept
// only for today and yesterday.
var boundedByDay = map[string]string{
	"claim_chunks":    "dedup claims saved 240 to a row; the days before yesterday are deleted",
	"rm_usage_daily":  "a row per place and UTC day",
	"rm_account_days": "a row per account, UTC day and kind of fact",
}

// grant is the bonus grant to many accounts under paid load.
func (r *report) grant() {
	plain, during := r.load("grant-plain"), r.load("grant-during")
	var gc grantCheck
	haveCheck := r.json("grant-check.json", &gc)
	if plain == nil || during == nil {
		return
	}
	var g grantRun
	var win *latencies
	if b, err := os.ReadFile(filepath.Join(r.dir, "grant-during.json")); err == nil {
		var x struct {
			Grant       *grantRun  `json:"grant"`
			DuringGrant *latencies `json:"during_grant"`
		}
		if json.Unmarshal(b, &x) == nil && x.Grant != nil {
			g, win = *x.Grant, x.DuringGrant
		}
	}
	r.p("## A bonus grant to %s accounts under paid load", thousands(float64(r.grantAccounts)))
	r.p("")
	r.p("%s accounts with one usable key each are opened in bulk (`bench/storebench accounts`: the rows and", thousands(float64(r.grantAccounts)))
	r.p("events of `OpenAccount` and `IssueKey`, a thousand accounts a transaction, appended through")
	r.p("`eventstore.Batch`), next to the %d paying accounts. After the growth benchmark below (run first: its", r.accounts)
	r.p("history lies in the past; its two accounts are eligible too), the paid place-detail load runs twice on")
	r.p("`kyapi serve`, %d connections: once plain, once with `POST /admin/bonus-grants` sent %.0f s into the", r.conns, g.AtS)
	r.p("run (`kyload -grant-at`); that run lasts until the grant is done. \"During the grant\" counts the")
	r.p("requests sent between the POST and the moment `GET /admin/bonus-grants/{id}` showed it done.")
	r.p("")
	r.p("| run | requests | req/s | p50 ms | p99 ms | p99.9 ms | errors |")
	r.p("|---|---:|---:|---:|---:|---:|---|")
	for _, x := range []struct {
		name string
		l    latencies
	}{{"plain", plain.Overall}, {"with the grant, whole run", during.Overall}} {
		r.p("| %s | %d | %s | %.2f | %.2f | %.2f | %s |", x.name, x.l.Requests, thousands(x.l.RPS), x.l.P50ms, x.l.P99ms, x.l.P999ms, errs(x.l))
	}
	if win != nil {
		r.p("| **during the grant** | %d | %s | %.2f | **%.2f** | %.2f | %s |", win.Requests, thousands(win.RPS), win.P50ms, win.P99ms, win.P999ms, errs(*win))
	}
	r.p("")
	post := fmt.Sprintf("answered %d after %.1f s", g.PostStatus, g.PostMs/1000)
	if g.PostStatus == 0 {
		post = fmt.Sprintf("got no answer (%s); the grant went on and was polled to the end", g.Error)
	}
	r.p("The grant took **%.1f s** on the server (`granted_at` to `finished_at`) and credited %s accounts; the POST %s.",
		g.ServerS, thousands(float64(g.Accounts)), post)
	if haveCheck {
		verdict := "**every eligible account was credited exactly once, and no other**"
		if !gc.Exact {
			verdict = "**the grant was NOT exact**"
		}
		r.p("Checked against the store (`bench/storebench grant-check`): %s accounts had a usable key when the grant was", thousands(float64(gc.Eligible)))
		r.p("asked for; %s `BonusGranted` events of the outage on %s accounts, %d eligible accounts missing, %d credited",
			thousands(float64(gc.Events)), thousands(float64(gc.Credited)), gc.Missing, gc.Ineligible)
		r.p("that were not eligible, %d with a wrong amount, %s reported by the grant: %s.", gc.WrongAmount, thousands(float64(gc.Reported)), verdict)
	}
	r.p("")
	if win != nil {
		r.check(fmt.Sprintf("paid p99 during a %s-account grant − plain p99", thousands(float64(r.grantAccounts))), "≤ +50 ms",
			win.P99ms-plain.Overall.P99ms, 50, false, "ms")
	}
	if haveCheck {
		t := target{name: "grant credits every eligible account exactly once", goal: "exact", measured: "exact", met: gc.Exact, margin: "checked against the store"}
		if !gc.Exact {
			t.measured = fmt.Sprintf("%d missing, %d ineligible, %d events on %d accounts", gc.Missing, gc.Ineligible, gc.Events, gc.Credited)
		}
		r.targets = append(r.targets, t)
	}
}

var (
	buffersRe   = regexp.MustCompile(`Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?`)
	executionRe = regexp.MustCompile(`Execution Time: ([\d.]+) ms`)
)

// planCost reads the buffers of a plan's top node and its execution time from EXPLAIN
// (ANALYZE, BUFFERS) output.
func planCost(plan string) (buffers int, ms float64, ok bool) {
	b := buffersRe.FindStringSubmatch(plan)
	e := executionRe.FindStringSubmatch(plan)
	if b == nil || e == nil {
		return 0, 0, false
	}
	hit, _ := strconv.Atoi(b[1])
	read, _ := strconv.Atoi(b[2])
	ms, _ = strconv.ParseFloat(e[1], 64)
	return hit + read, ms, true
}

var auditedRe = regexp.MustCompile(`audited (\d+) accounts`)

// auditedAccounts reads the number of accounts from kyapi audit's summary line.
func auditedAccounts(summary string) float64 {
	m := auditedRe.FindStringSubmatch(summary)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	return n
}

var growthReads = []struct{ key, name string }{
	{"account", "`GET /admin/accounts/{id}`"},
	{"balance_at_early", "`balance-at` an early instant"},
	{"ledger_first", "ledger, first page (100)"},
	{"ledger_last", "ledger, last page (100)"},
}

// growth is the growth benchmark: one account's history at each size.
func (r *report) growth() {
	var g growthResult
	if !r.json("growth.json", &g) || len(g.Steps) == 0 {
		if t := strings.TrimSpace(r.text("growth.txt")); t != "" {
			r.p("## Growth: one account with a long history")
			r.p("")
			r.p("The growth benchmark did not finish:")
			r.p("")
			r.p("```")
			r.p("%s", t)
			r.p("```")
			r.p("")
		}
		return
	}
	first, last := g.Steps[0], g.Steps[len(g.Steps)-1]
	r.p("## Growth: one account with a long history")
	r.p("")
	r.p("One account's history grown to %s events (`bench/storebench growth`, sizes `BENCH_GROWTH_SIZES=%s`):",
		thousands(float64(last.Events)), r.growthSizes)
	r.p("opened, keyed and paid for through the commands, then charges of one credit (a place list paying one new row) appended in")
	r.p("transactions of 10,000 through `eventstore.Batch` (`kyapi_append`, hash-chained, marks every 256th")
	r.p("event), each under the account's row lock and moving its balance and totals, spread evenly over the 30")
	r.p("days before the run (written before the bonus grant benchmark: an account's events are recorded in time")
	r.p("order, and a key issued after a grant is recorded after the grant's instant, today, and every charge")
	r.p("with it). At each size, once every projection has caught up and the tables the append wrote have been")
	r.p("vacuumed and analyzed (`VACUUM (ANALYZE)`, which autovacuum would otherwise be doing while the reads")
	r.p("run) and checkpointed (so that no checkpoint writing out what they dirtied runs with the reads either;")
	r.p("both together are the seconds shown), each admin read is sent %d times over HTTP", g.Reps)
	r.p("to the running `kyapi serve`, the four reads taking turns so that a burst of other work slows all of them")
	r.p("alike (median shown; p90 and max in the raw results), and `kyapi audit` runs over")
	r.p("the whole store (duration, events/s, peak RSS of the process from its rusage). The store also holds")
	r.p("the catalog, the benchmark's other accounts and their charges (\"store events\").")
	ref := g.ReferenceEvents > 0 && len(last.Reads["ref_account"].Path) > 0
	if ref {
		r.p("")
		r.p("Beside it, a reference account with a %s-event history written the same way before the first size", thousands(float64(g.ReferenceEvents)))
		r.p("is read at every size too, in the same rounds: \"long / short\" divides the growing account's time by the")
		r.p("reference's in the same store at the same moment. That is the history's own cost; \"largest / smallest\"")
		r.p("also carries what a store %s× larger and the machine at that moment do to every read alike.",
			fmt.Sprintf("%.1f", float64(last.Audit.Events)/float64(max(first.Audit.Events, 1))))
	}
	r.p("")
	head := "| | "
	sep := "|---|"
	for _, s := range g.Steps {
		head += thousands(float64(s.Events)) + " | "
		sep += "---:|"
	}
	r.p("%slargest / smallest |", head)
	r.p("%s---:|", sep)
	row := func(name string, f func(growthStep) float64, format string) {
		line := "| " + name + " | "
		for _, s := range g.Steps {
			line += fmt.Sprintf(format, f(s)) + " | "
		}
		ratio := "—"
		if f(first) > 0 && !strings.HasSuffix(format, "×") {
			ratio = fmt.Sprintf("%.2f×", f(last)/f(first))
		}
		r.p("%s%s |", line, ratio)
	}
	for _, rd := range growthReads {
		row(rd.name+", ms", func(s growthStep) float64 { return s.Reads[rd.key].P50ms }, "%.2f")
		if ref {
			row("the same, reference account, ms", func(s growthStep) float64 { return s.Reads["ref_"+rd.key].P50ms }, "%.2f")
			row("long / short (same store)", func(s growthStep) float64 {
				if b := s.Reads["ref_"+rd.key].P50ms; b > 0 {
					return s.Reads[rd.key].P50ms / b
				}
				return 0
			}, "%.2f×")
		}
	}
	row("`kyapi audit`, s", func(s growthStep) float64 { return s.Audit.Seconds }, "%.1f")
	row("`kyapi audit`, events/s", func(s growthStep) float64 { return s.Audit.EventsPerSec }, "%.0f")
	row("`kyapi audit`, peak RSS MB", func(s growthStep) float64 { return s.Audit.PeakRSSMB }, "%.0f")
	row("store events (audited)", func(s growthStep) float64 { return float64(s.Audit.Events) }, "%.0f")
	row("accounts in the store (audited)", func(s growthStep) float64 { return auditedAccounts(s.Audit.Summary) }, "%.0f")
	row("database size, MB", func(s growthStep) float64 { return float64(s.DatabaseBytes) / 1e6 }, "%.0f")
	row("bulk append, events/s", func(s growthStep) float64 { return s.AppendRate }, "%.0f")
	row("projections catching up after it, s", func(s growthStep) float64 { return s.CatchUpS }, "%.1f")
	row("`VACUUM (ANALYZE)` and `CHECKPOINT` after it, s", func(s growthStep) float64 { return s.VacuumS }, "%.1f")
	r.p("")
	var audits []string
	for _, s := range g.Steps {
		if !s.Audit.Clean {
			audits = append(audits, fmt.Sprintf("at %s events: %s %s", thousands(float64(s.Events)), s.Audit.Summary, s.Audit.Error))
		}
	}
	r.p("`kyapi audit` keeps one running state per stream it is auditing, not the events, and audits small streams")
	r.p("a thousand at a time: its memory follows the list of streams in the store (here the grant benchmark's")
	r.p("%s accounts as well, about 200 bytes each), not the length of any account's history.", thousands(float64(r.grantAccounts)))
	r.p("Its rate is the store's rows read in one snapshot on the two cores it shares with PostgreSQL, which")
	r.p("reads them: at small sizes the fixed cost (catching the read models up, listing 250,000 streams,")
	r.p("comparing 100,000 accounts' rows) dominates, and at 10,000,000 events it is bounded by PostgreSQL")
	r.p("sending the rows and by the work per event: the SHA-256 of its fields and a decode of its payload")
	r.p("(read in place, without allocating: `domain.DecodeAccountFactBorrowing`).")
	r.p("")
	if len(audits) == 0 {
		r.p("Every audit was clean (0 differences).")
	} else {
		r.p("**Audits with differences or errors:** %s", strings.Join(audits, "; "))
	}
	r.p("")

	at := thousands(float64(last.Events))
	var missed []string
	for _, rd := range growthReads {
		a, b := first.Reads[rd.key].P50ms, last.Reads[rd.key].P50ms
		n0 := len(r.targets)
		if a > 0 {
			r.check(fmt.Sprintf("%s at %s events / at %s", rd.name, at, thousands(float64(first.Events))), "≤ 2×", b/a, 2, false, "×")
		}
		if c := last.Reads["ref_"+rd.key].P50ms; ref && c > 0 {
			r.check(fmt.Sprintf("%s, %s-event account / %s-event account in the same store", rd.name, at, thousands(float64(g.ReferenceEvents))), "≤ 2×", b/c, 2, false, "×")
		}
		r.check(fmt.Sprintf("%s at %s events", rd.name, at), "< 10 ms", b, 10, false, "ms")
		for _, t := range r.targets[n0:] {
			if !t.met {
				missed = append(missed, rd.key)
				break
			}
		}
	}
	r.check(fmt.Sprintf("`kyapi audit` peak RSS at %s account events", at), "< 256 MB", last.Audit.PeakRSSMB, 256, false, "MB")
	r.check(fmt.Sprintf("`kyapi audit` rate at %s account events", at), "≥ 300,000 events/s", last.Audit.EventsPerSec, 300000, true, "events/s")

	before, after := r.load("growth-before"), r.load("growth-after")
	if before != nil && after != nil && before.Overall.RPS > 0 {
		r.p("Metered place detail (`kyload`, %d connections, %d s each, the %d paying accounts) just before the", r.conns, r.seconds, r.accounts)
		r.p("history was written and after it (vacuumed, analyzed and checkpointed), each on a server started afresh")
		r.p("that then served the same load for %d s unmeasured (its meter reads every account's claims from the", r.seconds)
		r.p("store once): **%s req/s before, %s req/s after** (%.2f×; p99 %.1f ms and %.1f ms).",
			thousands(before.Overall.RPS), thousands(after.Overall.RPS), after.Overall.RPS/before.Overall.RPS, before.Overall.P99ms, after.Overall.P99ms)
		if md := r.load("metered-detail"); md != nil {
			r.p("The first metered detail run of this benchmark, on a store holding only the catalog, gave %s req/s.", thousands(md.Overall.RPS))
		}
		ratio := after.Overall.RPS / before.Overall.RPS
		if lo, hi, n := rangeOf(r.loadRounds(), rpsOf(meteredDetail)); ratio < 1 && n > 1 && lo > 0 {
			within := "within that: the reads above, which do not grow with the history, say the same"
			if ratio < lo/hi {
				within = "more than that: the history itself costs the metered path"
			}
			r.p("The same metered detail run, with nothing changed between its rounds but the time, gave %s to %s",
				thousands(lo), thousands(hi))
			r.p("req/s over the %d rounds at the top (the slowest %.2f× the fastest); a fall to %.2f× is %s.", n, lo/hi, ratio, within)
		}
		r.p("")
		r.check(fmt.Sprintf("metered detail rate after %s events / before", at), "≥ 1.0× (does not fall)", ratio, 1, true, "×")
	}
	if len(missed) > 0 {
		r.p("### Why a read missed its target")
		r.p("")
		r.p("The reads are index descents whose cost should not depend on the history's length; where one")
		r.p("missed, this is PostgreSQL's plan for the store query behind it at %s events and at %s", thousands(float64(first.Events)), at)
		r.p("(`EXPLAIN (ANALYZE, BUFFERS)`, the query text of `eventstore/read.go`). `GET /admin/accounts/{id}` reads one")
		r.p("account row and its keys; the ledger's first page is the same query as its last.")
		r.p("")
		for _, k := range missed {
			b0, t0, ok0 := planCost(first.Explain[k])
			b1, t1, ok1 := planCost(last.Explain[k])
			if ok0 && ok1 {
				verdict := "the query itself grows with the history"
				if b1 <= 2*b0 && t1 < 2 {
					verdict = "the query is bounded; what grew is the time around it (HTTP, and a machine shared with other work: see Machine)"
				}
				r.p("**%s**: the plan reads %d buffers at %s events and %d at %s, executing in %.2f ms and %.2f ms: %s.",
					k, b0, thousands(float64(first.Events)), b1, at, t0, t1, verdict)
				r.p("")
			}
			for _, s := range []growthStep{first, last} {
				if plan, ok := s.Explain[k]; ok {
					r.p("%s at %s events:", k, thousands(float64(s.Events)))
					r.p("")
					r.p("```")
					r.p("%s", plan)
					r.p("```")
					r.p("")
				}
			}
		}
	}
}
