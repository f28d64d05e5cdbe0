package main

import (
	"testing"
	"time"
)

func TestParseMixAcceptsWeightsAndRefusesUnknownOperations(t *testing.T) {
	for _, tc := range []struct {
		mix string
		ok  bool
	}{
		{"detail=70,list=10,search=10,menu=10", true},
		{"detail=100", true},
		{"detail=0,list=5", true},
		{"detail=0", false},
		{"trending=10", false},
		{"detail", false},
		{"detail=-1", false},
	} {
		_, err := parseMix(tc.mix)
		if (err == nil) != tc.ok {
			t.Errorf("parseMix(%q) error = %v, want ok=%v", tc.mix, err, tc.ok)
		}
	}
}

func TestRequireLoopbackRefusesAnyOtherHost(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080", true},
		{"http://[::1]:8080", true},
		{"http://10.0.0.1:8080", false},
		{"http://192.0.2.7", false},
		{"ftp://127.0.0.1", false},
	} {
		if err := requireLoopback(tc.url); (err == nil) != tc.ok {
			t.Errorf("requireLoopback(%q) error = %v, want ok=%v", tc.url, err, tc.ok)
		}
	}
}

func TestDuringGrantCountsOnlyTheRequestsSentWhileTheGrantRan(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	stats := []workerStats{{
		lat:    map[op][]time.Duration{opDetail: {time.Millisecond, 50 * time.Millisecond, 60 * time.Millisecond, 2 * time.Millisecond}},
		starts: map[op][]time.Time{opDetail: {at(1), at(5), at(7), at(10)}},
		codes:  map[op][]string{opDetail: {"200", "200", "503", "200"}},
	}}
	d := during(stats, at(5), at(10))
	if d.Requests != 2 || d.Status["200"] != 1 || d.Status["503"] != 1 || d.Errors != 1 {
		t.Fatalf("during(5s, 10s) = %+v, want the two requests sent at 5 s and 7 s", d)
	}
	if d.P50ms != 60 {
		t.Errorf("p50 = %v ms, want 60", d.P50ms)
	}
}
