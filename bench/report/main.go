// Command report turns the raw results of bench/run.sh into docs/benchmarks.md: the
// machine, every figure, the ratios, each target met or missed (and by how much), the
// profile of the metered path, and the commands to reproduce.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

type latencies struct {
	Requests int            `json:"requests"`
	RPS      float64        `json:"rps"`
	P50ms    float64        `json:"p50_ms"`
	P99ms    float64        `json:"p99_ms"`
	P999ms   float64        `json:"p999_ms"`
	Status   map[string]int `json:"status"`
	Errors   int            `json:"errors"`
}

type loadRun struct {
	Label              string               `json:"label"`
	Mix                string               `json:"mix"`
	Connections        int                  `json:"connections"`
	Keys               int                  `json:"keys"`
	DurationS          float64              `json:"duration_s"`
	Overall            latencies            `json:"overall"`
	ByOp               map[string]latencies `json:"by_op"`
	ServerCPUPercent   float64              `json:"server_cpu_percent"`
	ServerMaxRSSMB     float64              `json:"server_max_rss_mb"`
	ClientCPUPercent   float64              `json:"client_cpu_percent"`
	MachineBusyPercent float64              `json:"machine_busy_percent"`
	ProjectionMaxLagMs float64              `json:"projection_max_lag_ms"`
	ProjectionSamples  int                  `json:"projection_lag_samples"`
	ProjectionLagError string               `json:"projection_lag_error"`
}

// goBench is one line of `go test -bench` output.
type goBench struct {
	Name    string
	NsPerOp float64
	Metrics map[string]float64
}

// rate is ops/s, or the benchmark's own rows/s metric when it reports one.
func (b goBench) rate(rowsPerOp float64) float64 {
	for _, m := range []string{"rows/s", "events/s", "appends/s", "charges/s"} {
		if v, ok := b.Metrics[m]; ok {
			return v
		}
	}
	if b.NsPerOp == 0 {
		return 0
	}
	return 1e9 / b.NsPerOp * rowsPerOp
}

func main() {
	dir := flag.String("dir", "", "raw results of bench/run.sh")
	out := flag.String("out", "docs/benchmarks.md", "document to write")
	places := flag.Int("places", 150000, "catalog size")
	seconds := flag.Int("seconds", 20, "seconds per load run")
	conns := flag.Int("connections", 64, "connections")
	accounts := flag.Int("accounts", 200, "accounts (keys)")
	mix := flag.String("mix", "", "mix")
	pgVersion := flag.String("pg-version", "", "PostgreSQL server version")
	grantAccounts := flag.Int("grant-accounts", 100000, "accounts opened for the bonus grant")
	growthSizes := flag.String("growth-sizes", "", "sizes of the growth benchmark")
	rounds := flag.Int("rounds", 1, "rounds of the metered and unmetered load runs")
	flag.Parse()
	r := &report{dir: *dir, places: *places, seconds: *seconds, conns: *conns, accounts: *accounts, mix: *mix, pgVersion: *pgVersion,
		grantAccounts: *grantAccounts, growthSizes: *growthSizes, rounds: *rounds}
	doc := r.write()
	if err := os.WriteFile(*out, []byte(doc), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", *out)
}

type report struct {
	dir                    string
	places, seconds, conns int
	accounts               int
	mix, pgVersion         string
	grantAccounts          int
	growthSizes            string
	rounds                 int
	b                      strings.Builder
	targets                []target
}

type target struct {
	name, goal, measured string
	met                  bool
	margin               string
}

func (r *report) p(format string, args ...any) { fmt.Fprintf(&r.b, format+"\n", args...) }

func (r *report) load(label string) *loadRun {
	b, err := os.ReadFile(filepath.Join(r.dir, label+".json"))
	if err != nil {
		return nil
	}
	var l loadRun
	if json.Unmarshal(b, &l) != nil {
		return nil
	}
	return &l
}

func (r *report) text(name string) string {
	b, _ := os.ReadFile(filepath.Join(r.dir, name))
	return string(b)
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+)\s+\d+\s+([\d.]+) ns/op(.*)$`)

func (r *report) benches(name string) []goBench {
	var out []goBench
	sc := bufio.NewScanner(strings.NewReader(r.text(name)))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		b := goBench{Name: regexp.MustCompile(`-\d+$`).ReplaceAllString(m[1], ""), Metrics: map[string]float64{}}
		b.NsPerOp, _ = strconv.ParseFloat(m[2], 64)
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				b.Metrics[f[i+1]] = v
			}
		}
		out = append(out, b)
	}
	return out
}

func find(bs []goBench, name string) (goBench, bool) {
	for _, b := range bs {
		if b.Name == name {
			return b, true
		}
	}
	return goBench{}, false
}

// check records a target; higher says whether more is better.
func (r *report) check(name, goal string, got, want float64, higher bool, unit string) {
	met := got >= want
	if !higher {
		met = got <= want
	}
	shown, gap := num(got, unit), num(abs(got-want), unit)
	pct := func(f float64) string { return fmt.Sprintf("%.0f%%", f) }
	if !met && shown == num(want, unit) {
		// A miss that rounds to the goal itself ("1.00× … missed by 0%") shows the digits that
		// make it one.
		shown, gap = fineNum(got, unit), fineNum(abs(got-want), unit)
		pct = func(f float64) string { return fmt.Sprintf("%.2g%%", f) }
	}
	var margin string
	switch {
	case want == 0:
		margin = "—"
	case met:
		margin = fmt.Sprintf("met with %.0f%% to spare", 100*abs(got-want)/want)
	case higher:
		margin = fmt.Sprintf("missed by %s (%s short)", pct(100*(want-got)/want), gap)
	default:
		margin = fmt.Sprintf("missed by %s (%s over)", pct(100*(got-want)/want), gap)
	}
	r.targets = append(r.targets, target{name, goal, shown, met, margin})
}

// fineNum is num with two more digits.
func fineNum(v float64, unit string) string {
	if unit == "×" {
		return fmt.Sprintf("%.4f×", v)
	}
	return fmt.Sprintf("%.4f %s", v, unit)
}

func abs(f float64) float64 { return max(f, -f) }

func num(v float64, unit string) string {
	switch {
	case unit == "×":
		return fmt.Sprintf("%.2f×", v)
	case abs(v) >= 100:
		return fmt.Sprintf("%s %s", thousands(v), unit)
	default:
		return fmt.Sprintf("%.2f %s", v, unit)
	}
}

func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (r *report) write() string {
	md, mm, un, um := r.load("metered-detail"), r.load("metered-mix"), r.load("unmetered-detail"), r.load("unmetered-mix")
	pg := r.benches("pgceiling.txt")
	cmdBench := r.benches("commands-bench.txt")

	r.p("# Benchmarks")
	r.p("")
	r.p("Written by `make bench` (`bench/run.sh`, then `bench/report`) on %s. Every figure below comes", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	r.p("from that one run, and every ratio compares two figures measured side by side in it: on a shared,")
	r.p("noisy 2-core machine absolute numbers move from run to run, the ratios much less. Regenerate this")
	r.p("file rather than editing it.")
	r.p("")
	r.settings()
	r.machine()

	r.p("## Read API under load (kyload, loopback)")
	r.p("")
	r.p("%d connections, %d s per run, %d accounts with one key each (requests pick a key at random),", r.conns, r.seconds, r.accounts)
	r.p("targets drawn at random from all %s places. The mix is `%s`: place detail, a list of 20", thousands(float64(r.places)), r.mix)
	r.p("(a town, offset 0–80), a geo search of 20 within 5 km of a random place, and a menu. Metered is")
	r.p("`kyapi serve` itself; unmetered is `bench/unmetered`, the same `readapi.Server` handlers on the same")
	r.p("database and index with a no-op meter (a benchmark-only binary: `kyapi serve` cannot turn metering")
	r.p("off). kyload runs on the same two cores as the server and PostgreSQL; its own CPU is shown.")
	r.p("The per-key rate limit is raised to 100,000,000/min for the run (the limiter still runs).")
	r.p("Before its runs each server serves the mix for %d s, not measured, so that the runs measure a", r.seconds)
	r.p("server that has been serving (the meter holding every account, the caches warm), not the first")
	r.p("seconds after the catalog import, which only the metered server, run first, would pay.")
	r.p("")
	r.p("| run | op | requests | req/s | p50 ms | p99 ms | p99.9 ms | errors |")
	r.p("|---|---|---:|---:|---:|---:|---:|---|")
	for _, l := range []*loadRun{md, mm, un, um} {
		if l == nil {
			continue
		}
		ops := []string{"detail", "list", "search", "menu"}
		for _, o := range ops {
			if x, ok := l.ByOp[o]; ok && len(l.ByOp) > 1 {
				r.p("| %s | %s | %d | %s | %.2f | %.2f | %.2f | %s |", l.Label, o, x.Requests, thousands(x.RPS), x.P50ms, x.P99ms, x.P999ms, errs(x))
			}
		}
		x := l.Overall
		r.p("| **%s** | all | %d | **%s** | %.2f | %.2f | %.2f | %s |", l.Label, x.Requests, thousands(x.RPS), x.P50ms, x.P99ms, x.P999ms, errs(x))
	}
	r.p("")
	r.p("| run | server CPU (%% of one core) | kyload CPU | rest: PostgreSQL and others | machine busy (both cores) | server max RSS | balances projection max lag |")
	r.p("|---|---:|---:|---:|---:|---:|---:|")
	for _, l := range []*loadRun{md, mm, un, um, r.load("metered-pprof")} {
		if l == nil {
			continue
		}
		lag := "—"
		if l.ProjectionSamples > 0 {
			lag = fmt.Sprintf("%.0f ms (%d samples)", l.ProjectionMaxLagMs, l.ProjectionSamples)
		}
		r.p("| %s | %.0f%% | %.0f%% | %.0f%% | %.0f%% | %.0f MB | %s |", l.Label, l.ServerCPUPercent, l.ClientCPUPercent,
			rest(l), l.MachineBusyPercent, l.ServerMaxRSSMB, lag)
	}
	r.p("")
	r.p("Projection lag is sampled by kyload every 200 ms (`-db`) as the age of the oldest event the")
	r.p("balances projection has not applied yet (after its checkpoint in `(transaction_id, position)` order);")
	r.p("zero when it is caught up. It is sampled in the metered runs only: unmetered runs append nothing.")
	r.p("")
	r.p("CPU figures are in %% of one core (the machine has %d). \"Rest\" is the machine's busy time not", runtime.NumCPU())
	r.p("spent in the server or kyload: PostgreSQL, and whatever else runs on this shared machine.")
	r.p("")

	rounds := r.loadRounds()
	if len(rounds) > 1 {
		r.roundsTable(rounds)
	}
	detail, nd := median(rounds, rpsRatio(meteredDetail, unmeteredDetail))
	detailP99, _ := median(rounds, p99Ratio(meteredDetail, unmeteredDetail))
	mixed, nm := median(rounds, rpsRatio(meteredMix, unmeteredMix))
	mixP99, _ := median(rounds, p99Ratio(meteredMix, unmeteredMix))
	over := ""
	if len(rounds) > 1 {
		over = fmt.Sprintf(", the median of %d rounds", nd)
	}
	if nd > 0 {
		r.p("**Metered / unmetered place detail: %.2f×**%s; p99, metered / unmetered: %.2f×.", detail, over, detailP99)
		if nm > 0 {
			r.p("Mix: %.2f×; p99 %.2f×.", mixed, mixP99)
		}
		r.p("")
		r.check("metered detail / unmetered detail", "≥ 0.8×", detail, 0.8, true, "×")
		r.check("metered detail p99 / unmetered detail p99", "≤ 2×", detailP99, 2, false, "×")
	}
	if nm > 0 {
		r.check("metered mix / unmetered mix", "≥ 0.8×", mixed, 0.8, true, "×")
		r.check("metered mix p99 / unmetered mix p99", "≤ 2×", mixP99, 2, false, "×")
	}
	r.detailAbsolute(rounds)

	r.bytesPerRequest(md, mm)
	r.redisLimiter(md)

	r.p("## Appends: metering against PostgreSQL's own ceiling")
	r.p("")
	r.p("`bench/pgceiling` on the same database, 16 connections (the pool size of `kyapi serve`): INSERT")
	r.p("transactions into a scratch table created `LIKE events INCLUDING ALL` (same identity, defaults,")
	r.p("unique and ordering indexes), and `commands.Meter.Charge` itself — metered place-detail requests")
	r.p("request, one transaction, as `kyapi serve` wires it — over 64 accounts, without HTTP.")
	r.p("")
	r.p("| benchmark | rows (appends) / s | µs per op |")
	r.p("|---|---:|---:|")
	for _, b := range pg {
		r.p("| bench/pgceiling %s | %s | %.1f |", b.Name, thousands(b.rate(1)), b.NsPerOp/1000)
	}
	for _, b := range cmdBench {
		r.p("| commands %s | %s ops/s | %.1f |", b.Name, thousands(b.rate(1)), b.NsPerOp/1000)
	}
	if len(cmdBench) > 0 {
		r.p("")
		r.p("The `commands` rows are that package's own benchmarks (own databases and concurrency; an op is")
		r.p("what that benchmark calls one, so compare them with each other, not with the rows above), run in")
		r.p("the same session.")
	}
	r.p("")
	batched, okB := find(pg, "BenchmarkPostgresInsertBatched50")
	single, okS := find(pg, "BenchmarkPostgresInsertSingleRow")
	charge, okC := find(pg, "BenchmarkChargeInFlight800")
	if c16, ok16 := find(pg, "BenchmarkChargeParallel"); ok16 && okB {
		r.p("With 16 charges in flight (BenchmarkChargeParallel) the meter's batches hold at most 16: %s charges/s, %.3f× the ceiling.",
			thousands(c16.rate(1)), c16.rate(1)/batched.rate(50))
	}
	if okB && okC {
		ceiling := batched.rate(50)
		ratio := charge.rate(1) / ceiling
		r.p("**Charge appends / batched-INSERT ceiling: %.3f×** (%s charges/s with 800 in flight, as the ceiling has 16 × 50 rows in flight, vs %s rows/s).", ratio, thousands(charge.rate(1)), thousands(ceiling))
		if okS {
			r.p("Against the single-row INSERT ceiling (%s rows/s): %.2f×.", thousands(single.rate(1)), charge.rate(1)/single.rate(1))
		}
		if md != nil {
			r.p("Through HTTP, metered place detail appended %s events/s (%.3f× the batched ceiling).", thousands(md.Overall.RPS), md.Overall.RPS/ceiling)
		}
		r.p("")
		r.check("charge appends / batched-INSERT ceiling", "≥ 0.7×", ratio, 0.7, true, "×")
	}

	// Lag and memory are judged at their worst over every metered run of every round.
	var lag, rss float64
	var lagOK bool
	for _, x := range rounds {
		for _, l := range []*loadRun{x.md, x.mm} {
			if l != nil && l.ProjectionSamples > 0 {
				lag, lagOK = max(lag, l.ProjectionMaxLagMs), true
			}
			if l != nil {
				rss = max(rss, l.ServerMaxRSSMB)
			}
		}
	}
	if lagOK {
		r.check("balances projection lag during the metered runs", "< 1 s", lag/1000, 1, false, "s")
	}
	if rss > 0 {
		r.check(fmt.Sprintf("kyapi serve RSS under load, %s-place catalog", thousands(float64(r.places))), "< 500 MB", rss, 500, false, "MB")
	}

	r.rebuild()
	r.digest()
	r.index()
	r.grant()
	r.growth()
	r.day()
	r.targetTable()
	r.bounds(rounds, md, un, charge, single, batched, okC && okS && okB)
	r.profile()
	r.pgStatements()
	r.reproduce()
	return r.b.String()
}

// rest is the busy CPU, in % of one core, spent outside the server and kyload.
func rest(l *loadRun) float64 {
	return max(0, l.MachineBusyPercent*float64(runtime.NumCPU())-l.ServerCPUPercent-l.ClientCPUPercent)
}

func errs(l latencies) string {
	if l.Errors == 0 {
		return "0"
	}
	var parts []string
	for code, n := range l.Status {
		if code != "200" {
			parts = append(parts, fmt.Sprintf("%d × %s", n, code))
		}
	}
	return fmt.Sprintf("%d (%s)", l.Errors, strings.Join(parts, ", "))
}

var rebuildLine = regexp.MustCompile(`^(\S+)\s+(\d+) events in ([\d.]+)s \((\d+) events/s\)`)

func (r *report) rebuild() {
	r.p("## Projection rebuild")
	r.p("")
	r.p("`kyapi rebuild` on the benchmark database after the load runs (the catalog plus every charge")
	r.p("event of the runs), servers stopped. Each projection replays the whole store from position 0;")
	r.p("events/s is the store's events over the seconds that took. Usage is rebuilt in one transaction")
	r.p("that sums its ranges in memory (each place's row of a day written once), the other read models")
	r.p("a range and a transaction at a time.")
	r.p("")
	r.p("| projection | events | seconds | events/s |")
	r.p("|---|---:|---:|---:|")
	slowest := -1.0
	slowestName := ""
	seconds := map[string]float64{}
	for line := range strings.Lines(r.text("rebuild.txt")) {
		m := rebuildLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		rate, _ := strconv.ParseFloat(m[4], 64)
		seconds[m[1]], _ = strconv.ParseFloat(m[3], 64)
		r.p("| %s | %s | %s | %s |", m[1], m[2], m[3], thousands(rate))
		if slowest < 0 || rate < slowest {
			slowest, slowestName = rate, m[1]
		}
	}
	r.p("")
	kinds := map[string]int64{}
	for line := range strings.Lines(r.text("rebuild-streams.txt")) {
		kind, n, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if v, err := strconv.ParseInt(n, 10, 64); ok && err == nil {
			kinds[kind] = v
		}
	}
	if len(kinds) > 0 {
		catalog := kinds["town"] + kinds["place"] + kinds["event"]
		r.p("Of the store's events, %s are the catalog's (towns, places, calendar events) and %s the accounts'.",
			thousands(float64(catalog)), thousands(float64(kinds["account"])))
		r.p("Each projection reads only its own event types (`EventTypes`): the account projections' cost")
		r.p("follows the charges; the catalog and the place index pass over the charges through the")
		r.p("`events_sparse` index and read only the %s catalog records (the place index only the %s places).",
			thousands(float64(catalog)), thousands(float64(kinds["place"])))
		if s, ok := seconds["catalog"]; ok && catalog > 0 {
			r.p("The catalog took %.0f µs a record (decoding it, rendering each place's list row and detail with its", s*1e6/float64(catalog))
			r.p("`field_trust`, upserting rows of several kB); ")
		}
		if s, ok := seconds["placeindex"]; ok && kinds["place"] > 0 {
			r.p("the place index %.0f µs a place (the embedded index's analysis and segment writes).", s*1e6/float64(kinds["place"]))
		}
		r.p("What bounds both is that work per catalog record, not the reading of the store: their events/s")
		r.p("rise with the share of charges in it, which they never read.")
		if b, ok := find(r.benches("bleve-rebuild.txt"), "BenchmarkRebuild150k"); ok && b.Metrics["places/s"] > 0 && kinds["place"] > 0 {
			perPlace := 1 / b.Metrics["places/s"]
			total := 0.0
			for _, n := range kinds {
				total += float64(n)
			}
			r.p("The embedded index alone, fed 150,000 generated places in batches of 5,000 as a rebuild writes them, with no database")
			r.p("(`GOGC=400 go test -bench Rebuild150k ./projections/placeindex/bleveindex/`, shorter texts than the demo's),")
			r.p("indexed %s places/s: %.0f µs a place in bleve's analysis, segment building and merges. At that",
				thousands(b.Metrics["places/s"]), perPlace*1e6)
			r.p("rate alone, reading and decoding nothing, this store's %s places take %.1f s, so its place index",
				thousands(float64(kinds["place"])), perPlace*float64(kinds["place"]))
			r.p("cannot replay faster than %s events/s on this machine.", thousands(total/(perPlace*float64(kinds["place"]))))
		}
		r.p("")
	}
	if slowest >= 0 {
		r.check("kyapi rebuild, slowest projection ("+slowestName+")", "≥ 100,000 events/s", slowest, 100000, true, "events/s")
	}
}

func (r *report) digest() {
	benches := r.benches("digest.txt")
	if len(benches) == 0 {
		return
	}
	r.p("## Digests and audits of 1,000,000 events")
	r.p("")
	r.p("`go test -bench BenchmarkDigest1M -benchtime 1x ./audit/`: a store of 1,000,000 events (20,000 streams")
	r.p("of 50) appended through the event store; `take` is `kyapi digest` (settle, read every stream head,")
	r.p("fold the Merkle root, sign), `verify` is the `-digest` part of `kyapi audit -digest` (every covered")
	r.p("event read and its chain recomputed), `audit` is `kyapi audit` itself.")
	r.p("")
	r.p("| step | seconds | events/s |")
	r.p("|---|---:|---:|")
	for _, b := range benches {
		rate := "-"
		if v, ok := b.Metrics["events/s"]; ok {
			rate = thousands(v)
		}
		r.p("| %s | %.2f | %s |", strings.TrimPrefix(b.Name, "BenchmarkDigest1M/"), b.NsPerOp/1e9, rate)
	}
	r.p("")
}

func (r *report) index() {
	r.p("## Embedded index on 150,000 places")
	r.p("")
	r.p("`go test -bench 'Near150k|ListQ150k' -benchtime 2000x ./projections/placeindex/bleveindex/`: a generated")
	r.p("150,000-place index, built then reopened, queried in process (no HTTP, no database).")
	r.p("")
	r.p("| query | p50 µs | p99 µs | mean µs | hits/op | RSS MB |")
	r.p("|---|---:|---:|---:|---:|---:|")
	worstGeo := -1.0
	for _, b := range r.benches("bleve.txt") {
		r.p("| %s | %.0f | %.0f | %.0f | %.1f | %.0f |", strings.TrimPrefix(b.Name, "Benchmark"), b.Metrics["p50-µs"], b.Metrics["p99-µs"], b.NsPerOp/1000, b.Metrics["hits/op"], b.Metrics["rss-MB"])
		if strings.HasPrefix(b.Name, "BenchmarkNear150k") {
			worstGeo = max(worstGeo, b.Metrics["p50-µs"]/1000)
		}
	}
	r.p("")
	if worstGeo >= 0 {
		r.check("geo search p50, 150k places, embedded index (worst radius)", "≤ 2 ms", worstGeo, 2, false, "ms")
	}
}

// bounds says, from the figures of this run, what limits the metered path.
func (r *report) bounds(rs []round, md, un *loadRun, charge, single, batched goBench, haveAppends bool) {
	if md == nil || un == nil {
		return
	}
	r.p("## What bounds the metered path")
	r.p("")
	r.p("- **The machine, not the server process.** During the metered detail run both cores were %.0f%% busy,", md.MachineBusyPercent)
	r.p("  but the server process used only %.0f%% of one core and kyload %.0f%%: the other %.0f%% (of one core) was", md.ServerCPUPercent, md.ClientCPUPercent, rest(md))
	r.p("  PostgreSQL (and neighbours). Unmetered, PostgreSQL only serves one primary-key read per request, and")
	r.p("  the same cores gave %s req/s.", thousands(un.Overall.RPS))
	if haveAppends {
		r.p("- **A durable commit per batch of charges.** %s A batch of accounts the meter holds is one", groupWiring())
		r.p("  round trip (`BEGIN`, `kyapi_charge`, `COMMIT`): the accounts' row locks, a check of their heads and keys, the")
		r.p("  events (one row and two index entries each, a hashed and JSON-encoded payload), the heads and the accounts")
		r.p("  moved, and a WAL flush at `COMMIT` (`synchronous_commit = on`). Without HTTP, with 800 charges in flight")
		r.p("  (as many as the ceiling has rows in flight), it runs at %s charges/s — %.2f× a bare single-row INSERT", thousands(charge.rate(1)),
			charge.rate(1)/single.rate(1))
		r.p("  transaction (%s/s) and %.3f× the 50-row batched INSERT (%s rows/s), which writes one row and its index",
			thousands(single.rate(1)), charge.rate(1)/batched.rate(1), thousands(batched.rate(1)))
		r.p("  entries and nothing else. Over HTTP a request adds a place read (the key is in the process's cache); the")
		r.p("  transaction's fixed cost (statements, executor start-up, the WAL flush) is shared by the charges that")
		if batches, charges, ok := r.batchesOf("metered-detail"); ok && batches > 0 {
			r.p("  arrive while the previous batch commits: %.1f on average in the metered detail run (%s charges in %s",
				charges/batches, thousands(charges), thousands(batches))
			r.p("  batches, from `kyapi_meter_batch_size` before and after it), not 800.")
		} else {
			r.p("  arrive while the previous batch commits, far fewer than 800 at 64 connections.")
		}
	}
	r.p("- **Projections compete for the same cores.** Every charge appends an event that the account")
	r.p("  projections read and apply while the load runs (see the profile below), in one range per 300 ms")
	r.p("  (`Runner.Gather`) rather than one per commit; their share of the server's CPU and their queries")
	r.p("  in PostgreSQL come out of the same two cores, and the balances projection's lag (%.0f ms at most", md.ProjectionMaxLagMs)
	r.p("  in the detail run) is the queue they build.")
	r.p("")
	r.requestCosts(rs)
}

// batchesOf is the meter's batches and the charges in them during a run: the differences of
// kyapi_meter_batch_size_count and _sum scraped before and after it (bench/run.sh).
func (r *report) batchesOf(run string) (batches, charges float64, ok bool) {
	read := func(when string) (count, sum float64, ok bool) {
		text := r.text(run + ".batches-" + when)
		count, okCount := metricValue(text, "kyapi_meter_batch_size_count")
		sum, okSum := metricValue(text, "kyapi_meter_batch_size_sum")
		return count, sum, okCount && okSum
	}
	c0, s0, ok0 := read("before")
	c1, s1, ok1 := read("after")
	return c1 - c0, s1 - s0, ok0 && ok1
}

// metricValue is the value of the sample named name (with its labels, as written) in a
// Prometheus text exposition.
func metricValue(text, name string) (float64, bool) {
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// groupWiring says how kyapi serve wires the meter in this checkout.
func groupWiring() string {
	b, err := os.ReadFile("internal/app/app.go")
	if err != nil {
		return ""
	}
	if strings.Contains(string(b), "commands.NewMeter(") {
		return "`kyapi serve` in this checkout wires `commands.Meter`: concurrent charges are committed together, a batch per transaction (group commit): one batch after another, each taking the charges of every lane, until 32 charges wait in a lane or are in flight; from then, two lanes' batches side by side, on accounts apart (docs/architecture.md)."
	}
	return ""
}

func (r *report) targetTable() {
	r.p("## Targets")
	r.p("")
	r.p("| target | goal | measured | result |")
	r.p("|---|---|---|---|")
	for _, t := range r.targets {
		res := "**missed**"
		if t.met {
			res = "met"
		}
		r.p("| %s | %s | %s | %s: %s |", t.name, t.goal, t.measured, res, t.margin)
	}
	r.p("")
}

// profileMarks are the functions whose cumulative share says where a metered request's
// CPU goes.
var profileMarks = []struct{ re, what string }{
	{`net/http\.\(\*conn\)\.serve$`, "all HTTP request handling"},
	{`readapi\.\(\*Server\)\.authorized\.func1$`, "read API: auth, rate limit, handler, charge"},
	{`commands\.\(\*Meter\)\.Charge$`, "metering: waiting for and answering a charge"},
	{`commands\.\(\*Meter\)\.runBatch$`, "metering: committing a batch of charges"},
	{`commands\.\(\*Meter\)\.Authenticate$`, "metering: key lookup (cached)"},
	{`readapi\.\(\*Server\)\.loadDetail$`, "place read: the stored detail bytes"},
	{`internal/httpx\.AccessLog\.func1\.1$`, "access log wrapper (includes the handler)"},
	{`sirupsen/logrus\.\(\*Entry\)\.Info$`, "access log line"},
	{`encoding/json\.`, "JSON encoding and decoding"},
	{`projections\.`, "projections applying the charge events"},
	{`jackc/pgx/v5/pgconn\.\(\*PgConn\)\.`, "PostgreSQL client protocol"},
	{`runtime\.gcBgMarkWorker$`, "garbage collection (background)"},
	{`runtime\.mallocgc$`, "allocation"},
	{`syscall\.Syscall6?$|internal/runtime/syscall\.Syscall6$`, "system calls (network I/O)"},
}

// pgStatements summarizes pg_stat_statements over the metered-pprof run: PostgreSQL's
// execution time per statement, per request served.
func (r *report) pgStatements() {
	tsv, run := r.text("pgss.tsv"), r.load("metered-pprof")
	if tsv == "" || run == nil || run.Overall.Status["200"] == 0 {
		return
	}
	served := float64(run.Overall.Status["200"])
	r.p("## Where PostgreSQL's time goes in the metered run")
	r.p("")
	r.p("`pg_stat_statements` over the same profiled detail run (%s requests served): each statement's", thousands(served))
	r.p("execution time inside PostgreSQL, summed, and divided by the requests served. Execution time")
	r.p("includes waiting for row locks (the accounts' `FOR UPDATE`), not the WAL flush of `COMMIT`,")
	r.p("nor the network round trips and process wake-ups around each statement.")
	r.p("")
	r.p("| statement | calls | rows | total ms | µs per request |")
	r.p("|---|---:|---:|---:|---:|")
	var total float64
	for line := range strings.Lines(tsv) {
		f := strings.SplitN(strings.TrimRight(line, "\n"), "\t", 4)
		if len(f) < 4 {
			continue
		}
		ms, _ := strconv.ParseFloat(f[1], 64)
		total += ms
		q := f[3]
		if len(q) > 110 {
			q = q[:110] + "…"
		}
		r.p("| `%s` | %s | %s | %s | %.0f |", strings.ReplaceAll(q, "|", "\\|"), f[0], f[2], thousands(ms), ms*1000/served)
	}
	r.p("")
	r.p("These statements took %s ms in all, %.0f µs per request served.", thousands(total), total*1000/served)
	r.p("")
}

func (r *report) profile() {
	top, cum := r.text("pprof-top.txt"), r.text("pprof-cum.txt")
	if top == "" {
		return
	}
	r.p("## Where the metered server's CPU goes")
	r.p("")
	r.p("CPU profile of `bench/metered` (the read API of `kyapi serve` with the real `commands.Meter` and")
	r.p("every projection running, plus pprof on loopback) under the place-detail load, summarized from")
	r.p("`go tool pprof -top -cum`. Shares are of the server's sampled CPU time.")
	r.p("")
	r.p("| function (cumulative) | share | what it is |")
	r.p("|---|---:|---|")
	for _, m := range profileMarks {
		re := regexp.MustCompile(m.re)
		for line := range strings.Lines(cum) {
			f := strings.Fields(line)
			if len(f) < 6 || !re.MatchString(f[5]) {
				continue
			}
			r.p("| `%s` | %s | %s |", f[5], f[4], m.what)
			break
		}
	}
	r.p("")
	r.p("Flat top of the same profile:")
	r.p("")
	r.p("```")
	for line := range strings.Lines(top) {
		if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") || strings.HasPrefix(line, "Type:") || strings.HasPrefix(line, "Time:") {
			continue
		}
		r.b.WriteString(line)
	}
	r.p("```")
	r.p("")
}

func (r *report) machine() {
	cpu, mem := "", ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if f := strings.Fields(line); len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			mem = fmt.Sprintf("%.1f GB", kb/1024/1024)
		}
	}
	kernel, _ := exec.Command("uname", "-r").Output()
	r.p("## Machine")
	r.p("")
	r.p("| | |")
	r.p("|---|---|")
	r.p("| CPUs (nproc) | %d |", runtime.NumCPU())
	r.p("| CPU model | %s |", cpu)
	r.p("| memory | %s |", mem)
	r.p("| kernel | Linux %s |", strings.TrimSpace(string(kernel)))
	r.p("| Go | %s |", runtime.Version())
	r.p("| PostgreSQL | %s (private cluster of `scripts/devdb.sh` unless DATABASE_URL was set; same machine) |", r.pgVersion)
	r.p("| catalog | %s |", strings.TrimSpace(r.text("demo-data.txt")))
	if s := strings.TrimSpace(r.text("serve-metered.ready_s")); s != "" {
		r.p("| first `kyapi serve` start (projections and the place index caught up) | %s s |", s)
	}
	r.p("")
	r.p("Server, PostgreSQL and the load generator share these cores, so every req/s figure is a figure")
	r.p("for the whole stack on this machine, not for the server alone.")
	r.p("")
	if top := strings.TrimSpace(r.text("neighbours.txt")); top != "" {
		r.p("The machine is shared: other work (other engineers' tests, benchmarks and builds, their test")
		r.p("databases on the same PostgreSQL cluster) ran during this run. A `top` snapshot taken while it")
		r.p("ran; every figure below is depressed by it, the side-by-side ratios less so:")
		r.p("")
		r.p("```")
		r.p("%s", top)
		r.p("```")
		r.p("")
	}
}

// settings names the knobs of this run, and any that differ from make bench's defaults.
func (r *report) settings() {
	var changed []string
	for _, k := range []struct {
		env, got, def string
	}{
		{"BENCH_PLACES", strconv.Itoa(r.places), "150000"},
		{"BENCH_SECONDS", strconv.Itoa(r.seconds), "20"},
		{"BENCH_CONNECTIONS", strconv.Itoa(r.conns), "64"},
		{"BENCH_ACCOUNTS", strconv.Itoa(r.accounts), "200"},
		{"BENCH_GRANT_ACCOUNTS", strconv.Itoa(r.grantAccounts), "100000"},
		{"BENCH_GROWTH_SIZES", r.growthSizes, "10000,100000,1000000,10000000"},
	} {
		if k.got != k.def {
			changed = append(changed, fmt.Sprintf("`%s=%s` (default %s)", k.env, k.got, k.def))
		}
	}
	if len(changed) > 0 {
		r.p("**This run changed the defaults:** %s. Figures that depend on them say so.", strings.Join(changed, ", "))
		r.p("")
	}
}

func (r *report) reproduce() {
	r.p("## Reproduce")
	r.p("")
	r.p("```sh")
	r.p("make bench                               # all of the above; writes this file (about 25 minutes)")
	r.p("BENCH_SECONDS=60 BENCH_CONNECTIONS=128 make bench   # longer runs, more connections")
	r.p("")
	r.p("# by hand, against a running kyapi serve (read API on :8080, admin API on :8081)")
	r.p("go build -o bin/kyload ./cmd/kyload")
	r.p("bin/kyload -url http://127.0.0.1:8080 -admin-url http://127.0.0.1:8081 -admin-token $ADMIN_TOKEN \\")
	r.p("  -accounts 200 -write-keys keys.txt -duration 20s -connections 64 -mix detail=100 -pid $(pgrep -n kyapi) -db $DATABASE_URL")
	r.p("bin/kyload -keys keys.txt -duration 20s -mix detail=70,list=10,search=10,menu=10")
	r.p("")
	r.p("# the pieces")
	r.p("BENCH_DATABASE_URL=$DATABASE_URL go test -run '^$' -bench . -benchtime 5s ./bench/pgceiling/")
	r.p("DATABASE_URL=... bin/kyapi rebuild")
	r.p("GOGC=400 go test -run '^$' -bench Rebuild150k -benchtime 1x ./projections/placeindex/bleveindex/   # the embedded index's share of a rebuild")
	r.p("go test -run '^$' -bench BenchmarkDigest1M -benchtime 1x ./audit/")
	r.p("go test -run '^$' -bench 'Near150k|ListQ150k' -benchtime 2000x ./projections/placeindex/bleveindex/")
	r.p("go build -o bin/storebench ./bench/storebench   # database sizes, bulk accounts, grant check, growth")
	r.p("bin/storebench size -label now                 # DATABASE_URL: the database to measure")
	r.p("bin/storebench accounts -n 100000 && bin/kyload -keys keys.txt -admin-url http://127.0.0.1:8081 -grant-at 5s -grant-outage o1")
	r.p("bin/storebench grant-check -outage o1")
	r.p("bin/storebench growth -sizes 10000,100000 -admin-url http://127.0.0.1:8081 -kyapi bin/kyapi")
	r.p("BENCH_GROWTH_SIZES=10000,100000,1000000 BENCH_GRANT_ACCOUNTS=20000 make bench   # smaller store benchmarks")
	r.p("```")
	r.p("")
	r.p("Raw results of the run (kyload JSON, benchmark output, the CPU profile) are kept in the directory")
	r.p("`bench/run.sh` prints at the end (`BENCH_OUT` chooses it).")
}
