package app

import (
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

type fakeClaims struct {
	forgotten int64
	held      int
}

func (f *fakeClaims) ClaimsForgotten() int64 { return f.forgotten }
func (f *fakeClaims) ClaimsHeld() int        { return f.held }

// The operator hears when the meter forgot claims for its bound (README, METER_MAX_CLAIMS):
// one warning per look that finds more forgotten than the last, with how many, and none when
// nothing was.
func TestTheOperatorIsWarnedWhenTheMeterForgetsClaimsForItsBound(t *testing.T) {
	log, hook := test.NewNullLogger()
	meter := &fakeClaims{forgotten: 5, held: 100}
	w := claimsWatcher{meter: meter, max: 120, log: log, last: meter.ClaimsForgotten()}

	w.check()
	if n := len(hook.AllEntries()); n != 0 {
		t.Fatalf("%d warnings with nothing forgotten since the start", n)
	}
	meter.forgotten, meter.held = 8, 110
	w.check()
	w.check()
	entries := hook.AllEntries()
	if len(entries) != 1 {
		t.Fatalf("%d warnings for one rise; want 1", len(entries))
	}
	e := entries[0]
	if e.Level != logrus.WarnLevel || e.Data["accounts_forgotten"] != int64(3) || e.Data["claims_held"] != 110 || e.Data["meter_max_claims"] != 120 {
		t.Fatalf("warning %v %v", e.Level, e.Data)
	}
}
