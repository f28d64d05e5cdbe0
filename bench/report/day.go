package main

import "github.com/kyapi/kyapi/commands"

// dayRun is what `storebench day` did (day.json).
type dayRun struct {
	Accounts      int     `json:"accounts"`
	ClaimsBefore  int     `json:"claims_before"`
	ClaimsAfter   int     `json:"claims_after"`
	Charges       int64   `json:"charges"`
	Paid          int64   `json:"paid"`
	Deduplicated  int64   `json:"deduplicated"`
	Seconds       float64 `json:"seconds"`
	ChargesPerSec float64 `json:"charges_per_sec"`
}

// day reports metered place detail late in a busy day: once the paying accounts hold millions
// of dedup claims of the day, which the meter must hold to decide from memory, against the
// same load on a server started afresh before them (growth-after).
func (r *report) day() {
	var d dayRun
	late, fresh := r.load("day-late"), r.load("growth-after")
	if !r.json("day.json", &d) || late == nil || fresh == nil || fresh.Overall.RPS <= 0 {
		return
	}
	mets := r.text("day-metrics.txt")
	held, okHeld := metricValue(mets, "kyapi_meter_claims_held")
	cold, _ := metricValue(mets, `kyapi_meter_claim_reads_total{kind="cold"}`)
	r.p("## Late in a busy day")
	r.p("")
	r.p("`bench/storebench day` charged the %d paying accounts %s place details of distinct places (%s paid, %s",
		d.Accounts, thousands(float64(d.Charges)), thousands(float64(d.Paid)), thousands(float64(d.Deduplicated)))
	r.p("already paid today by the runs above) through `commands.Meter`, as `kyapi serve` meters them, at %s charges/s:",
		thousands(d.ChargesPerSec))
	if d.ClaimsAfter > 0 {
		r.p("as many as took the accounts' claims of the day from %s (the runs above) to %s, within the %s that",
			thousands(float64(d.ClaimsBefore)), thousands(float64(d.ClaimsAfter)), thousands(float64(commands.DefaultMaxClaims)))
		r.p("`kyapi serve` holds by default (`METER_MAX_CLAIMS`), with room for the runs below;")
	}
	r.p("what a busy day leaves, every account with thousands of dedup claims of the day. Then `kyapi serve`")
	r.p("started afresh, its projections caught up, it served the detail load for %d s unmeasured (each", r.seconds)
	r.p("account's first charge reads its day of claims from the claim chunks), and the run below was measured.")
	if okHeld {
		r.p("After it the meter held **%s claims** of the day (`kyapi_meter_claims_held`; %s accounts' claims read",
			thousands(held), thousands(cold))
		r.p("cold from the store since the start, `kyapi_meter_claim_reads_total{kind=\"cold\"}`). Versions before")
		r.p("the flat claim tables (`commands.claimSet`) held at most 2,000,000: past that, a process forgot accounts it")
		r.p("charged again a moment later and read their day back in most batches (docs/operations.md, \"The maintenance loop\").")
	}
	r.p("")
	r.p("| run | requests | req/s | p50 ms | p99 ms | p99.9 ms | server CPU | errors |")
	r.p("|---|---:|---:|---:|---:|---:|---:|---|")
	for _, l := range []struct {
		name string
		run  *loadRun
	}{{"a server started afresh, before (growth-after)", fresh}, {"late in a busy day", late}} {
		x := l.run.Overall
		r.p("| %s | %d | %s | %.2f | %.2f | %.2f | %.0f%% | %s |", l.name, x.Requests, thousands(x.RPS), x.P50ms, x.P99ms, x.P999ms,
			l.run.ServerCPUPercent, errs(x))
	}
	r.p("")
	r.check("metered detail late in a busy day / on a server started afresh before it (this project's guard)", "≥ 0.8×",
		late.Overall.RPS/fresh.Overall.RPS, 0.8, true, "×")
}
