package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeRun(t *testing.T, dir, label string, rps, p99 float64) {
	t.Helper()
	b, err := json.Marshal(loadRun{Label: label, Overall: latencies{RPS: rps, P99ms: p99}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, label+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The targets judge the median over the rounds of each round's own ratio: not the ratio of
// medians, and not round 1 alone.
func TestTheTargetsJudgeTheMedianOfEachRoundsRatio(t *testing.T) {
	dir := t.TempDir()
	for _, run := range []struct {
		label    string
		rps, p99 float64
	}{
		// round 1 (no suffix), 2 and 3; the mix of round 3 lacks its unmetered run.
		{"metered-detail", 5000, 30}, {"unmetered-detail", 10000, 15},
		{"metered-detail-r2", 6000, 24}, {"unmetered-detail-r2", 8000, 16},
		{"metered-detail-r3", 7000, 20}, {"unmetered-detail-r3", 10000, 20},
		{"metered-mix", 2000, 50}, {"unmetered-mix", 2500, 50},
		{"metered-mix-r2", 3000, 40}, {"unmetered-mix-r2", 3000, 40},
		{"metered-mix-r3", 9999, 1},
		// A run of a round the report was not told of is not read.
		{"metered-detail-r4", 1, 1}, {"unmetered-detail-r4", 1000, 1},
	} {
		writeRun(t, dir, run.label, run.rps, run.p99)
	}

	r := &report{dir: dir, rounds: 3}
	rs := r.loadRounds()
	if len(rs) != 3 {
		t.Fatalf("%d rounds, want 3", len(rs))
	}
	// Detail ratios 0.5, 0.75, 0.7: the median is 0.7 (the ratio of the medians would be 0.6).
	if got, n := median(rs, rpsRatio(meteredDetail, unmeteredDetail)); n != 3 || got != 0.7 {
		t.Errorf("detail: median %v over %d rounds, want 0.7 over 3", got, n)
	}
	// p99 ratios 2, 1.5, 1.
	if got, n := median(rs, p99Ratio(meteredDetail, unmeteredDetail)); n != 3 || got != 1.5 {
		t.Errorf("detail p99: median %v over %d rounds, want 1.5 over 3", got, n)
	}
	// Mix ratios 0.8 and 1 (round 3 has no unmetered run): the mean of the middle two.
	if got, n := median(rs, rpsRatio(meteredMix, unmeteredMix)); n != 2 || got != 0.9 {
		t.Errorf("mix: median %v over %d rounds, want 0.9 over 2", got, n)
	}
	if got, n := median(rs, rpsOf(meteredDetail)); n != 3 || got != 6000 {
		t.Errorf("metered detail req/s: median %v over %d rounds, want 6000 over 3", got, n)
	}
	if lo, hi, n := rangeOf(rs, rpsOf(meteredDetail)); n != 3 || lo != 5000 || hi != 7000 {
		t.Errorf("metered detail req/s range %v to %v over %d rounds, want 5000 to 7000 over 3", lo, hi, n)
	}
	if _, n := median(nil, rpsRatio(meteredDetail, unmeteredDetail)); n != 0 {
		t.Errorf("no rounds: %d figures", n)
	}

	r.roundsTable(rs)
	doc := r.b.String()
	for _, want := range []string{"| 1 | 5,000 | 10,000 | 0.50× | 2.00× | 2,000 | 2,500 | 0.80× | 1.00× |",
		"| 3 | 7,000 | 10,000 | 0.70× | 1.00× | 9,999 | — | — | — |"} {
		if !strings.Contains(doc, want) {
			t.Errorf("the rounds' table lacks the row %q:\n%s", want, doc)
		}
	}
	if i := strings.Index(doc, "%!"); i >= 0 {
		t.Errorf("a format verb went wrong in the text around the rounds' table: %q", doc[max(0, i-40):min(len(doc), i+40)])
	}
}

// A missed absolute detail target comes with the unmetered figures of the same rounds; a met
// one says nothing more.
func TestAMissedAbsoluteDetailTargetShowsTheMachinesSpeedBesideIt(t *testing.T) {
	for _, c := range []struct {
		metRPS, metP99 float64
		explained      bool
	}{{6000, 20, false}, {4000, 20, true}, {6000, 31, true}} {
		dir := t.TempDir()
		writeRun(t, dir, "metered-detail", c.metRPS, c.metP99)
		writeRun(t, dir, "unmetered-detail", 8000, 18)
		r := &report{dir: dir, rounds: 1}
		r.detailAbsolute(r.loadRounds())
		doc := r.b.String()
		if got := strings.Contains(doc, "the unmetered server gave a median of 8,000 req/s with a p99 of 18.0 ms"); got != c.explained {
			t.Errorf("metered %v req/s, p99 %v ms: explained %v, want %v:\n%s", c.metRPS, c.metP99, got, c.explained, doc)
		}
		if len(r.targets) != 2 {
			t.Errorf("%d targets judged, want the throughput and the p99", len(r.targets))
		}
	}
}

// A target missed by less than its figures' rounding says by how much, not "1.00× … missed by
// 0% (0.00× short)"; one missed by more keeps the usual digits.
func TestATargetMissedByLessThanTheRoundingShowsTheDigitsThatMissIt(t *testing.T) {
	r := &report{}
	r.check("after / before", "≥ 1.0×", 6094.0/6101.0, 1, true, "×")
	r.check("p99", "< 25 ms", 25.001, 25, false, "ms")
	r.check("ratio", "≥ 0.8×", 0.62, 0.8, true, "×")
	r.check("met", "≥ 1.0×", 1.0, 1, true, "×")
	want := []target{
		{"after / before", "≥ 1.0×", "0.9989×", false, "missed by 0.11% (0.0011× short)"},
		{"p99", "< 25 ms", "25.0010 ms", false, "missed by 0.004% (0.0010 ms over)"},
		{"ratio", "≥ 0.8×", "0.62×", false, "missed by 23% (0.18× short)"},
		{"met", "≥ 1.0×", "1.00×", true, "met with 0% to spare"},
	}
	for i, w := range want {
		if r.targets[i] != w {
			t.Errorf("target %d: %+v, want %+v", i, r.targets[i], w)
		}
	}
}
