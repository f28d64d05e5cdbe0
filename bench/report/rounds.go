package main

import (
	"fmt"
	"slices"
)

// round is one turn of the load runs of bench/run.sh: metered place detail and mix on `kyapi
// serve`, place detail on `kyapi serve -projections=false` (mp), then detail and mix on
// bench/unmetered. Round 1 is the runs labelled without a suffix (the ones the rest of the report
// describes); round n > 1 has the suffix -rn.
type round struct{ md, mm, mp, un, um *loadRun }

func (r *report) loadRounds() []round {
	rs := make([]round, 0, max(r.rounds, 1))
	for i := 1; i <= max(r.rounds, 1); i++ {
		suffix := ""
		if i > 1 {
			suffix = fmt.Sprintf("-r%d", i)
		}
		rs = append(rs, round{r.load("metered-detail" + suffix), r.load("metered-mix" + suffix),
			r.load("metered-detail-noproj" + suffix), r.load("unmetered-detail" + suffix), r.load("unmetered-mix" + suffix)})
	}
	return rs
}

// A figure of a round; ok is false where a run it needs is missing (or measured nothing).
type roundFigure func(round) (v float64, ok bool)

// ratioOf is, in a round, f of a metered run over f of the unmetered run it is compared with.
func ratioOf(metered, unmetered func(round) *loadRun, f func(latencies) float64) roundFigure {
	return func(x round) (float64, bool) {
		m, u := metered(x), unmetered(x)
		if m == nil || u == nil || f(u.Overall) <= 0 {
			return 0, false
		}
		return f(m.Overall) / f(u.Overall), true
	}
}

func rps(l latencies) float64 { return l.RPS }
func p99(l latencies) float64 { return l.P99ms }

func rpsRatio(metered, unmetered func(round) *loadRun) roundFigure {
	return ratioOf(metered, unmetered, rps)
}
func p99Ratio(metered, unmetered func(round) *loadRun) roundFigure {
	return ratioOf(metered, unmetered, p99)
}

// figureOf is a figure of one run of a round.
func figureOf(run func(round) *loadRun, f func(latencies) float64) roundFigure {
	return func(x round) (float64, bool) {
		if l := run(x); l != nil {
			return f(l.Overall), true
		}
		return 0, false
	}
}

func rpsOf(run func(round) *loadRun) roundFigure { return figureOf(run, rps) }
func p99Of(run func(round) *loadRun) roundFigure { return figureOf(run, p99) }

var (
	meteredDetail   = func(x round) *loadRun { return x.md }
	meteredMix      = func(x round) *loadRun { return x.mm }
	meteredNoProj   = func(x round) *loadRun { return x.mp }
	unmeteredDetail = func(x round) *loadRun { return x.un }
	unmeteredMix    = func(x round) *loadRun { return x.um }
)

// median is the median of f over the rounds where it is defined (the mean of the middle two
// for an even count), and how many rounds that is.
func median(rs []round, f roundFigure) (float64, int) {
	var vs []float64
	for _, x := range rs {
		if v, ok := f(x); ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0, 0
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2], n
	}
	return (vs[n/2-1] + vs[n/2]) / 2, n
}

// rangeOf is the lowest and highest of f over the rounds where it is defined, and how many
// rounds that is.
func rangeOf(rs []round, f roundFigure) (lo, hi float64, n int) {
	for _, x := range rs {
		if v, ok := f(x); ok {
			if n == 0 || v < lo {
				lo = v
			}
			hi, n = max(hi, v), n+1
		}
	}
	return lo, hi, n
}

// roundsTable shows every round's figures side by side, for the medians the targets judge.
func (r *report) roundsTable(rs []round) {
	r.p("Each ratio the targets below judge is the median over %d rounds of these four runs, the metered and", len(rs))
	r.p("the unmetered server taking turns (`BENCH_ROUNDS`; each server started afresh and warmed up as above;")
	r.p("round 1 is the runs above). On this shared machine two runs minutes apart differ by 10–15%% for")
	r.p("reasons of their own, so one pair of runs alone can land a ratio either side of its target.")
	r.p("")
	r.p("| round | metered detail req/s | unmetered detail req/s | ratio | p99 ratio | metered mix req/s | unmetered mix req/s | ratio | p99 ratio |")
	r.p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	cell := func(f roundFigure, x round, show func(float64) string) string {
		if v, ok := f(x); ok {
			return show(v)
		}
		return "—"
	}
	times := func(v float64) string { return fmt.Sprintf("%.2f×", v) }
	for i, x := range rs {
		r.p("| %d | %s | %s | %s | %s | %s | %s | %s | %s |", i+1,
			cell(rpsOf(meteredDetail), x, thousands), cell(rpsOf(unmeteredDetail), x, thousands),
			cell(rpsRatio(meteredDetail, unmeteredDetail), x, times), cell(p99Ratio(meteredDetail, unmeteredDetail), x, times),
			cell(rpsOf(meteredMix), x, thousands), cell(rpsOf(unmeteredMix), x, thousands),
			cell(rpsRatio(meteredMix, unmeteredMix), x, times), cell(p99Ratio(meteredMix, unmeteredMix), x, times))
	}
	r.p("")
}

// detailAbsolute judges the metered detail throughput and p99 themselves (medians over the
// rounds). They move with the machine, so when either misses, the report gives the unmetered
// server's figures of the same rounds beside them: how fast the machine was during the run.
func (r *report) detailAbsolute(rs []round) {
	detailRPS, n := median(rs, rpsOf(meteredDetail))
	if n == 0 {
		return
	}
	detailP99ms, _ := median(rs, p99Of(meteredDetail))
	r.check("metered detail throughput, 64 connections", "≥ 5,000 req/s", detailRPS, 5000, true, "req/s")
	r.check("metered detail p99, 64 connections", "< 25 ms", detailP99ms, 25, false, "ms")
	unRPS, nu := median(rs, rpsOf(unmeteredDetail))
	if (detailRPS >= 5000 && detailP99ms < 25) || nu == 0 {
		return
	}
	unP99ms, _ := median(rs, p99Of(unmeteredDetail))
	r.p("The metered detail throughput and p99 targets are absolute figures, and move with the machine: in")
	r.p("the same rounds the unmetered server gave a median of %s req/s with a p99 of %.1f ms on the same", thousands(unRPS), unP99ms)
	r.p("cores. The ratios, measured side by side, are the figures another run can be compared by; what")
	r.p("bounds the metered path is below (\"What bounds the metered path\").")
	r.p("")
}
