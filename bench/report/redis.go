package main

// redisLimiter compares the metered detail run with the rate limit shared in Redis
// (REDIS_URL) against the same run with it shared in the database (no REDIS_URL).
func (r *report) redisLimiter(md *loadRun) {
	rd := r.load("metered-detail-redis")
	if rd == nil || md == nil || md.Overall.RPS == 0 {
		return
	}
	r.p("## Rate limit shared in Redis")
	r.p("")
	r.p("The metered detail run again, `kyapi serve` with `REDIS_URL` set to a private `redis-server` on")
	r.p("the same machine: every request runs the rate-limit script in Redis (one round trip) instead of")
	r.p("being counted in PostgreSQL (`rate_windows`, one call per batch of requests), as every other run")
	r.p("counts. The limit is raised as in every run, so the limiter counts and never refuses.")
	r.p("")
	r.p("| run | requests | req/s | p50 ms | p99 ms | p99.9 ms | server CPU | errors |")
	r.p("|---|---:|---:|---:|---:|---:|---:|---|")
	for _, l := range []*loadRun{md, rd} {
		r.p("| %s | %d | %s | %.2f | %.2f | %.2f | %.0f%% | %s |", l.Label, l.Overall.Requests, thousands(l.Overall.RPS),
			l.Overall.P50ms, l.Overall.P99ms, l.Overall.P999ms, l.ServerCPUPercent, errs(l.Overall))
	}
	r.p("")
	r.p("**Redis / database limiter, metered place detail: %.2f×** (%s vs %s req/s; p99 %.2f vs %.2f ms).",
		rd.Overall.RPS/md.Overall.RPS, thousands(rd.Overall.RPS), thousands(md.Overall.RPS), rd.Overall.P99ms, md.Overall.P99ms)
	r.p("")
}
