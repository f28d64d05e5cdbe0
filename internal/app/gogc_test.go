package app

import (
	"runtime/debug"
	"testing"
)

// gcPercent is the collector's target now.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// serve and rebuild pick their own GOGC, unless the operator set one (README, "GOGC").
func TestDefaultGOGCYieldsToTheOperatorsGOGC(t *testing.T) {
	before := gcPercent()
	t.Setenv("GOGC", "")
	restore := DefaultGOGC(321)
	if p := gcPercent(); p != 321 {
		t.Fatalf("GOGC unset: the target is %d, want 321", p)
	}
	restore()
	if p := gcPercent(); p != before {
		t.Fatalf("restored to %d, want %d", p, before)
	}
	t.Setenv("GOGC", "150")
	restore = DefaultGOGC(321)
	if p := gcPercent(); p != before {
		t.Fatalf("GOGC=150 set by the operator: the target moved to %d", p)
	}
	restore()
}
