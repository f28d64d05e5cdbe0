package elasticindex_test

import (
	"context"
	"strings"
	"testing"
)

// The checkpoint index is gone (deleted by hand, a snapshot restore of the places only):
// Checkpoint fails, rather than claim an empty index and have the projection replay the whole
// store into the live generation (found by review).
func TestAMissingCheckpointIndexIsAnErrorNotAnEmptyIndex(t *testing.T) {
	f := liveAt3()
	x := f.open(t, f.serve(t))
	f.mu.Lock()
	f.deleteIndex("places-checkpoint")
	f.mu.Unlock()
	cp, err := x.Checkpoint(context.Background())
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing checkpoint index read as checkpoint %q (%v)", cp, err)
	}
}
