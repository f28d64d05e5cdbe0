package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Towns the list requests page through; all are in the demo catalog.
var listTowns = []string{"louisville", "lexington", "bowling-green", "owensboro", "covington", "frankfort",
	"paducah", "richmond", "georgetown", "florence", "elizabethtown", "hopkinsville", "bardstown", "berea"}

// workerStats is what one worker saw; merged after the run, so the hot path shares nothing.
type workerStats struct {
	lat    map[op][]time.Duration
	starts map[op][]time.Time // when each request of lat was sent
	status map[op]map[string]int
	codes  map[op][]string // each request's status, for the grant window
}

func drive(ctx context.Context, c *http.Client, o options, mix []weighted, keys []string, places placeSet) (*summary, error) {
	total := 0
	for _, w := range mix {
		total += w.weight
	}
	var grant *grantRun
	var cancel context.CancelFunc
	start := time.Now()
	if o.grantAt > 0 {
		// With a grant the run lasts at least until the grant is done (at most 15 minutes), so
		// that the whole grant is measured under load.
		ctx, cancel = context.WithCancel(ctx)
		grant = &grantRun{OutageID: o.grantOutage, finishedOnce: make(chan struct{})}
		go runGrant(ctx, c, o, start, grant)
		go func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(o.duration):
			}
			select {
			case <-grant.finishedOnce:
				time.Sleep(time.Second)
			case <-time.After(15 * time.Minute):
			}
			cancel()
		}()
	} else {
		ctx, cancel = context.WithTimeout(ctx, o.duration)
	}
	defer cancel()

	samplers := startSamplers(ctx, o)
	var sent atomic.Int64
	stats := make([]workerStats, o.connections)
	cpu0, _ := readCPU(os.Getpid())
	busy0, all0 := machineTicks()
	var wg sync.WaitGroup
	for w := range o.connections {
		wg.Go(func() {
			st := workerStats{lat: map[op][]time.Duration{}, starts: map[op][]time.Time{}, status: map[op]map[string]int{}, codes: map[op][]string{}}
			r := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for ctx.Err() == nil && sent.Add(1) <= int64(o.maxRequests) {
				kind := pick(r, mix, total)
				u := target(r, o.url, kind, places)
				key := keys[r.IntN(len(keys))]
				t0 := time.Now()
				code := do(ctx, c, u, key)
				if code == "canceled" {
					break // the run ended mid-request; neither a result nor an error
				}
				st.lat[kind] = append(st.lat[kind], time.Since(t0))
				if grant != nil {
					st.starts[kind] = append(st.starts[kind], t0)
					st.codes[kind] = append(st.codes[kind], code)
				}
				if st.status[kind] == nil {
					st.status[kind] = map[string]int{}
				}
				st.status[kind][code]++
			}
			stats[w] = st
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cancel()
	cpu1, _ := readCPU(os.Getpid())
	busy1, all1 := machineTicks()
	s := summarize(o, stats, elapsed)
	s.Keys = len(keys)
	s.ClientCPUPercent = cpuPercent(cpu1-cpu0, elapsed)
	if all1 > all0 {
		s.MachineBusyPercent = float64(busy1-busy0) / float64(all1-all0) * 100
	}
	samplers.finish(s)
	if grant != nil {
		s.Grant = grant
		from, to := grant.window()
		if !from.IsZero() {
			if to.IsZero() {
				to = start.Add(elapsed)
			}
			d := during(stats, from, to)
			s.DuringGrant = &d
		}
	}
	return s, nil
}

// during summarizes the requests sent between from and to.
func during(stats []workerStats, from, to time.Time) latencies {
	var lat []time.Duration
	status := map[string]int{}
	for _, st := range stats {
		for kind, starts := range st.starts {
			for i, t := range starts {
				if !t.Before(from) && t.Before(to) {
					lat = append(lat, st.lat[kind][i])
					status[st.codes[kind][i]]++
				}
			}
		}
	}
	return percentiles(lat, status, to.Sub(from))
}

func pick(r *rand.Rand, mix []weighted, total int) op {
	n := r.IntN(total)
	for _, w := range mix {
		if n < w.weight {
			return w.op
		}
		n -= w.weight
	}
	return mix[len(mix)-1].op
}

func target(r *rand.Rand, base string, kind op, places placeSet) string {
	switch kind {
	case opList:
		return base + "/api/data/places?limit=20&town=" + listTowns[r.IntN(len(listTowns))] + "&offset=" + strconv.Itoa(20*r.IntN(5))
	case opSearch:
		lat, lng := 36.5+r.Float64()*2.6, -89.5+r.Float64()*7.5
		if len(places.located) > 0 {
			p := places.located[r.IntN(len(places.located))]
			lat, lng = p.lat, p.lng
		}
		return base + "/api/data/search?limit=20&radius=5&lat=" + strconv.FormatFloat(lat, 'f', 5, 64) + "&lng=" + strconv.FormatFloat(lng, 'f', 5, 64)
	case opMenu:
		return base + "/api/data/places/" + places.withMenu[r.IntN(len(places.withMenu))].id + "/menu"
	default:
		return base + "/api/data/places/" + places.all[r.IntN(len(places.all))].id
	}
}

// do sends one request and returns its status code, or the kind of transport error.
func do(ctx context.Context, c *http.Client, u, key string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "bad_request_url"
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "canceled"
		}
		if strings.Contains(err.Error(), "timeout") {
			return "timeout"
		}
		return "transport_error"
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// samplers watch the server process and the projection lag while the load runs.
type samplers struct {
	done       chan struct{}
	cpuStart   int64
	startedAt  time.Time
	pid        int
	mu         sync.Mutex
	maxRSSKB   int64
	maxLag     time.Duration
	lagSamples int
	lagErr     error
}

func startSamplers(ctx context.Context, o options) *samplers {
	s := &samplers{done: make(chan struct{}), pid: o.pid, startedAt: time.Now()}
	if o.pid > 0 {
		s.cpuStart, _ = readCPU(o.pid)
	}
	var pool *pgxpool.Pool
	if o.db != "" {
		cfg, err := pgxpool.ParseConfig(o.db)
		if err == nil {
			cfg.ConnConfig.RuntimeParams["jit"] = "off" // as the service's own connections
			pool, err = pgxpool.NewWithConfig(ctx, cfg)
		}
		if err != nil {
			s.lagErr = err
		}
	}
	go func() {
		defer close(s.done)
		if pool != nil {
			defer pool.Close()
		}
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if o.pid > 0 {
				if kb, err := readRSSKB(o.pid); err == nil {
					s.mu.Lock()
					s.maxRSSKB = max(s.maxRSSKB, kb)
					s.mu.Unlock()
				}
			}
			if pool != nil {
				lag, err := projectionLag(ctx, pool)
				s.mu.Lock()
				if err == nil {
					s.maxLag = max(s.maxLag, lag)
					s.lagSamples++
				} else if ctx.Err() == nil {
					s.lagErr = err
				}
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// projectionLag is the age of the oldest event the balances projection has not applied
// yet: zero when it is caught up, otherwise how far behind the store it runs.
func projectionLag(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	var secs float64
	// The checkpoint first, then the events after it as an index range: joined, the planner
	// walks the whole global order.
	var tx string
	var pos int64
	if err := pool.QueryRow(ctx, `SELECT transaction_id::text, position FROM projection_checkpoints WHERE name = 'balances'`).Scan(&tx, &pos); err != nil {
		return 0, err
	}
	// ORDER BY … LIMIT keeps even a generic plan on the index: PostgreSQL estimates such a
	// range at a share of the whole store and would scan every partition.
	err := pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM clock_timestamp() - min(recorded_at)), 0)::float8
		FROM (SELECT recorded_at FROM events WHERE (transaction_id, position) > ($1::text::xid8, $2)
			ORDER BY transaction_id, position LIMIT 1000000) behind`, tx, pos).Scan(&secs)
	return time.Duration(secs * float64(time.Second)), err
}

func (s *samplers) finish(sum *summary) {
	<-s.done
	if s.pid > 0 {
		if cpu, err := readCPU(s.pid); err == nil {
			sum.ServerCPUPercent = cpuPercent(cpu-s.cpuStart, time.Since(s.startedAt))
		}
		sum.ServerMaxRSSMB = float64(s.maxRSSKB) / 1024
	}
	if s.lagSamples > 0 {
		sum.ProjectionMaxLagMs = float64(s.maxLag.Microseconds()) / 1000
		sum.ProjectionLagSamples = s.lagSamples
	}
	if s.lagErr != nil {
		sum.ProjectionLagError = s.lagErr.Error()
	}
}

// readCPU returns utime+stime of a process in clock ticks (fields 14 and 15 of stat).
func readCPU(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name may contain spaces; fields are counted after its closing paren.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, nil
}

// clockTicks is USER_HZ, 100 on every Linux platform Go supports.
const clockTicks = 100

// cpuPercent is CPU time over wall time, in percent of one core (200% is two full cores).
func cpuPercent(ticks int64, wall time.Duration) float64 {
	return float64(ticks) / clockTicks / wall.Seconds() * 100
}

// machineTicks returns the busy and total CPU ticks of all cores (first line of /proc/stat).
func machineTicks() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		if i >= 8 { // guest time is already counted in user time
			break
		}
		n, _ := strconv.ParseInt(f, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

func readRSSKB(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// latencies are the percentiles of one operation, in milliseconds.
type latencies struct {
	Requests int            `json:"requests"`
	RPS      float64        `json:"rps"`
	P50ms    float64        `json:"p50_ms"`
	P99ms    float64        `json:"p99_ms"`
	P999ms   float64        `json:"p999_ms"`
	Status   map[string]int `json:"status"`
	Errors   int            `json:"errors"`
}

type summary struct {
	Label                string               `json:"label"`
	URL                  string               `json:"url"`
	Mix                  string               `json:"mix"`
	Connections          int                  `json:"connections"`
	Keys                 int                  `json:"keys"`
	DurationS            float64              `json:"duration_s"`
	Overall              latencies            `json:"overall"`
	ByOp                 map[string]latencies `json:"by_op"`
	ServerCPUPercent     float64              `json:"server_cpu_percent"`
	ServerMaxRSSMB       float64              `json:"server_max_rss_mb"`
	ClientCPUPercent     float64              `json:"client_cpu_percent"`
	MachineBusyPercent   float64              `json:"machine_busy_percent"` // all cores, from /proc/stat
	ProjectionMaxLagMs   float64              `json:"projection_max_lag_ms"`
	ProjectionLagSamples int                  `json:"projection_lag_samples"`
	ProjectionLagError   string               `json:"projection_lag_error,omitempty"`
	Grant                *grantRun            `json:"grant,omitempty"`
	DuringGrant          *latencies           `json:"during_grant,omitempty"` // requests sent while the grant ran
}

func summarize(o options, stats []workerStats, elapsed time.Duration) *summary {
	s := &summary{Label: o.label, URL: o.url, Mix: o.mix, Connections: o.connections, DurationS: elapsed.Seconds(), ByOp: map[string]latencies{}}
	var all []time.Duration
	allStatus := map[string]int{}
	for _, kind := range allOps {
		var lat []time.Duration
		status := map[string]int{}
		for _, st := range stats {
			lat = append(lat, st.lat[kind]...)
			for code, n := range st.status[kind] {
				status[code] += n
				allStatus[code] += n
			}
		}
		if len(lat) == 0 {
			continue
		}
		all = append(all, lat...)
		s.ByOp[string(kind)] = percentiles(lat, status, elapsed)
	}
	s.Overall = percentiles(all, allStatus, elapsed)
	return s
}

func percentiles(lat []time.Duration, status map[string]int, elapsed time.Duration) latencies {
	slices.Sort(lat)
	at := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	l := latencies{Requests: len(lat), RPS: float64(len(lat)) / elapsed.Seconds(), P50ms: at(0.50), P99ms: at(0.99), P999ms: at(0.999), Status: status}
	for code, n := range status {
		if code != "200" {
			l.Errors += n
		}
	}
	return l
}

func (s *summary) print(w io.Writer) {
	fmt.Fprintf(w, "kyload %s: %s, mix %s, %d connections, %.1fs\n", s.Label, s.URL, s.Mix, s.Connections, s.DurationS)
	line := func(name string, l latencies) {
		fmt.Fprintf(w, "  %-8s %8d req %9.1f req/s  p50 %7.2f ms  p99 %7.2f ms  p99.9 %7.2f ms  errors %d %v\n",
			name, l.Requests, l.RPS, l.P50ms, l.P99ms, l.P999ms, l.Errors, l.Status)
	}
	for _, kind := range allOps {
		if l, ok := s.ByOp[string(kind)]; ok {
			line(string(kind), l)
		}
	}
	line("overall", s.Overall)
	if s.ServerCPUPercent > 0 || s.ServerMaxRSSMB > 0 {
		fmt.Fprintf(w, "  server CPU %.0f%% (of one core), max RSS %.0f MB; kyload CPU %.0f%%; machine %.0f%% busy\n",
			s.ServerCPUPercent, s.ServerMaxRSSMB, s.ClientCPUPercent, s.MachineBusyPercent)
	}
	if s.ProjectionLagSamples > 0 {
		fmt.Fprintf(w, "  balances projection max lag %.0f ms (%d samples)\n", s.ProjectionMaxLagMs, s.ProjectionLagSamples)
	}
	if g := s.Grant; g != nil {
		fmt.Fprintf(w, "  grant %s: asked at %.1fs (POST %d in %.0f ms), %s at %.1fs, %d accounts, %.1fs on the server %s\n",
			g.OutageID, g.AtS, g.PostStatus, g.PostMs, g.State, g.DoneS, g.Accounts, g.ServerS, g.Error)
		if d := s.DuringGrant; d != nil {
			line("in grant", *d)
		}
	}
	if s.ProjectionLagError != "" {
		fmt.Fprintf(w, "  projection lag sampling failed: %s\n", s.ProjectionLagError)
	}
}
