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
// account leaves it at its next charge that gets the row (charged, or refused for its key or
// its balance), or heldFor after its last wait timed out.
type heldAccounts struct {
	mu     sync.Mutex
	since  map[string]time.Time // account id → when its last wait for the row timed out
	pruned time.Time            // when the marks older than heldFor were last dropped
}

// heldFor is how long an account whose row was held is waited for briefly with no new timeout.
const heldFor = time.Minute

func (h *heldAccounts) mark(id string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since == nil {
		h.since = map[string]time.Time{}
	}
	h.since[id] = now
}

// prune drops the marks older than heldFor, at most once every heldFor: a table-wide lock that
// times out thousands of accounts at once marks each of them, and going through every mark at
// each would cost the square of their number. A mark is kept at most twice heldFor; is ignores
// it after heldFor.
func (h *heldAccounts) prune(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.since) == 0 || now.Sub(h.pruned) < heldFor {
		return
	}
	h.pruned = now
	for id, at := range h.since {
		if now.Sub(at) > heldFor {
			delete(h.since, id)
		}
	}
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
