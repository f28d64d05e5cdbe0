package commands

import (
	"sync"
	"time"
)

// heldAccounts are the accounts whose row another transaction held past the meter's wait the
// last time a batch asked for it (an admin command that hangs, an operator's open
// transaction): their charges are decided apart from the others' and wait for the row only
// MeterOptions.HeldWait, so that a row held for minutes does not make every batch of the
// process wait LockWait, one after another, while that account's clients keep asking. An
// account leaves it at its next charge that gets the row (answered, charged or refused), or
// heldFor after its last wait timed out.
type heldAccounts struct {
	mu    sync.Mutex
	since map[string]time.Time // account id → when its last wait for the row timed out
}

// heldFor is how long an account whose row was held is waited for briefly with no new timeout.
const heldFor = time.Minute

func (h *heldAccounts) mark(id string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since == nil {
		h.since = map[string]time.Time{}
	}
	for other, at := range h.since {
		if now.Sub(at) > heldFor {
			delete(h.since, other)
		}
	}
	h.since[id] = now
}

func (h *heldAccounts) clear(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.since, id)
}

// is tells whether id's row was held the last time it was waited for, within heldFor.
func (h *heldAccounts) is(id string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.since[id]
	return ok && now.Sub(at) <= heldFor
}
