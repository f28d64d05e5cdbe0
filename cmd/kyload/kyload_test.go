package main

import "testing"

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
