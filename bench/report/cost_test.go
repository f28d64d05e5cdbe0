package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// A request's cost is the machine's busy time over the requests served: at 50% of every core
// and 1,000 req/s, each request costs NumCPU × 500 µs, the server's share 40% of one core → 400 µs.
func TestARequestCostsTheBusyTimeOverTheRequestsServed(t *testing.T) {
	c, ok := costOf(&loadRun{Overall: latencies{RPS: 1000}, MachineBusyPercent: 50, ServerCPUPercent: 40, ClientCPUPercent: 10})
	if !ok {
		t.Fatal("no cost for a run with a rate and a busy machine")
	}
	cpus := float64(runtime.NumCPU())
	if c.machine != cpus*500 || c.server != 400 || c.kyload != 100 || c.rest != cpus*500-500 {
		t.Errorf("cost %+v, want machine %v, server 400, kyload 100, rest %v", c, cpus*500, cpus*500-500)
	}
	if _, ok := costOf(&loadRun{MachineBusyPercent: 50}); ok {
		t.Error("a run that served nothing has a cost")
	}
}

// The report shows the projections-off run beside the metered and unmetered ones, from the
// runs labelled metered-detail-noproj (-rn), and what the 0.8× target would need.
func TestTheReportShowsWhatTheProjectionsCost(t *testing.T) {
	dir := t.TempDir()
	cpus := float64(runtime.NumCPU())
	for label, rps := range map[string]float64{"metered-detail": 4000, "metered-detail-noproj": 4800, "unmetered-detail": 8000} {
		// every core fully busy: a request costs cpus × 1e6 / rps µs
		b, err := json.Marshal(loadRun{Label: label, Overall: latencies{RPS: rps}, MachineBusyPercent: 100, ServerCPUPercent: 50 * cpus, ClientCPUPercent: 10 * cpus})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, label+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &report{dir: dir, rounds: 1}
	r.requestCosts(r.loadRounds())
	doc := r.b.String()
	md, mp, un := cpus*1e6/4000, cpus*1e6/4800, cpus*1e6/8000
	for _, want := range []string{
		"| metered, projections off (`kyapi serve -projections=false`) | 4,800 |",
		"at most " + f0(un/0.8) + " µs",
		"It costs " + f0(md) + " µs: metering adds " + f0(md-un) + " µs",
		"runs at 0.60× the unmetered one",
		"the projections take " + f0(md-mp) + " µs",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q:\n%s", want, doc)
		}
	}
}

func f0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
