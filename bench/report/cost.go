package main

import "runtime"

// requestCost is a run's CPU per request served, in µs: the machine's busy time (every core)
// and its parts, the server, kyload, and the rest (PostgreSQL and whatever else ran).
type requestCost struct{ machine, server, kyload, rest float64 }

func costOf(l *loadRun) (requestCost, bool) {
	if l == nil || l.Overall.RPS <= 0 || l.MachineBusyPercent <= 0 {
		return requestCost{}, false
	}
	// percent of one core → µs of CPU per request
	per := func(percent float64) float64 { return percent / 100 / l.Overall.RPS * 1e6 }
	return requestCost{
		machine: per(l.MachineBusyPercent * float64(runtime.NumCPU())),
		server:  per(l.ServerCPUPercent),
		kyload:  per(l.ClientCPUPercent),
		rest:    per(rest(l)),
	}, true
}

// costFigure is one part of a run's request cost, as a round figure.
func costFigure(run func(round) *loadRun, part func(requestCost) float64) roundFigure {
	return func(x round) (float64, bool) {
		c, ok := costOf(run(x))
		return part(c), ok
	}
}

// requestCosts shows where the CPU of a place-detail request goes, metered, metered with the
// projections off, and unmetered (medians over the rounds), and what the 0.8× target would need.
// On a machine whose cores are busy in every run, throughput is the inverse of this cost, so it
// says what bounds the metered rate in figures rather than words.
func (r *report) requestCosts(rs []round) {
	type row struct {
		name string
		run  func(round) *loadRun
	}
	rows := []row{
		{"metered (`kyapi serve`)", meteredDetail},
		{"metered, projections off (`kyapi serve -projections=false`)", meteredNoProj},
		{"unmetered (`bench/unmetered`)", unmeteredDetail},
	}
	parts := []func(requestCost) float64{
		func(c requestCost) float64 { return c.machine },
		func(c requestCost) float64 { return c.server },
		func(c requestCost) float64 { return c.kyload },
		func(c requestCost) float64 { return c.rest },
	}
	costs := map[string][4]float64{}
	have := map[string]bool{}
	for _, x := range rows {
		var c [4]float64
		n := 0
		for i, part := range parts {
			c[i], n = median(rs, costFigure(x.run, part))
		}
		costs[x.name], have[x.name] = c, n > 0
	}
	md, mp, un := costs[rows[0].name], costs[rows[1].name], costs[rows[2].name]
	if !have[rows[0].name] || !have[rows[2].name] {
		return
	}
	r.p("### What a place-detail request costs")
	r.p("")
	r.p("CPU per request served: each run's busy time (both cores) divided by its requests, and its parts,")
	r.p("the median over %d rounds of each figure. `kyapi serve -projections=false` is the metered server", len(rs))
	r.p("with the read-model projections stopped (the place index still runs), its events projected by the next")
	r.p("server started: the difference from the metered run is what the projections cost under this load.")
	r.p("")
	r.p("| server | req/s | machine µs per request | server | kyload | PostgreSQL and the rest |")
	r.p("|---|---:|---:|---:|---:|---:|")
	for _, x := range rows {
		if !have[x.name] {
			continue
		}
		rate, _ := median(rs, rpsOf(x.run))
		c := costs[x.name]
		r.p("| %s | %s | %.0f | %.0f | %.0f | %.0f |", x.name, thousands(rate), c[0], c[1], c[2], c[3])
	}
	r.p("")
	budget := un[0] / 0.8
	r.p("With every core busy, a rate is the inverse of this cost: 0.8× the unmetered rate needs a metered")
	r.p("request to cost at most %.0f µs (the unmetered %.0f µs / 0.8). It costs %.0f µs: metering adds %.0f µs", budget, un[0], md[0], md[0]-un[0])
	r.p("(%+.0f in the server, %+.0f in PostgreSQL and the rest, %+.0f in kyload; each a median of its own, so", md[1]-un[1], md[3]-un[3], md[2]-un[2])
	r.p("the parts need not add up exactly), and %.0f µs of it would have to go.", max(0, md[0]-budget))
	if have[rows[1].name] {
		ratio, _ := median(rs, rpsRatio(meteredNoProj, unmeteredDetail))
		r.p("With the projections off the metered server runs at %.2f× the unmetered one and a request costs", ratio)
		if md[0] >= mp[0] {
			r.p("%.0f µs: the projections take %.0f µs of what metering adds, the charge itself (the meter, its batch", mp[0], md[0]-mp[0])
			r.p("transaction and the WAL) %.0f.", mp[0]-un[0])
		} else {
			r.p("%.0f µs, %.0f µs more than with them: within the machine's noise, the projections are not what", mp[0], mp[0]-md[0])
			r.p("metering costs; the charge itself (the meter, its batch transaction and the WAL) is.")
		}
	}
	r.p("")
}
