package commands

import (
	"fmt"
	"testing"
	"time"
)

// The held marks are dropped heldFor after they were made, by a prune that runs at most once
// every heldFor; a mark stays held for heldFor whatever the prunes do.
func TestHeldMarksAreDroppedOnceTheyAreOlderThanHeldFor(t *testing.T) {
	var h heldAccounts
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for i := range 1000 {
		h.mark(fmt.Sprint("old", i), t0)
	}
	h.prune(t0.Add(heldFor / 2))
	if !h.is("old7", t0.Add(heldFor/2)) || len(h.since) != 1000 {
		t.Fatalf("half of heldFor after the marks: held %v, %d marks; want held, 1000", h.is("old7", t0.Add(heldFor/2)), len(h.since))
	}
	// The prune went through the marks at half of heldFor: the next one does heldFor later.
	h.prune(t0.Add(heldFor + time.Second))
	if len(h.since) != 1000 || h.is("old7", t0.Add(heldFor+time.Second)) {
		t.Fatalf("just after heldFor: %d marks, old held %v; want 1000 kept by the map, not held", len(h.since), h.is("old7", t0.Add(heldFor+time.Second)))
	}
	t1 := t0.Add(heldFor/2 + heldFor)
	h.mark("new", t1)
	h.prune(t1)
	if len(h.since) != 1 || !h.is("new", t1) || h.is("old7", t1) {
		t.Fatalf("after heldFor: %d marks (new held %v, old held %v); want the new one alone", len(h.since), h.is("new", t1), h.is("old7", t1))
	}
	// A prune soon after the last one goes through nothing: the new mark outlives heldFor in
	// the map, but is no longer held.
	t2 := t1.Add(heldFor / 2)
	h.prune(t2)
	h.mark("newer", t2)
	if t3 := t1.Add(heldFor + time.Second); h.is("new", t3) || !h.is("newer", t3) {
		t.Fatalf("heldFor after the new mark: new held %v, newer held %v; want false, true", h.is("new", t3), h.is("newer", t3))
	}
	h.clear("newer")
	if h.is("newer", t2) {
		t.Fatal("a cleared mark is still held")
	}
}
