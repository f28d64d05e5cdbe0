package commands

import (
	"sync"

	"github.com/kyapi/kyapi/eventstore"
)

// accountState is what a meter knows of an account it charged: what its decisions need, as it
// stood once the account's last batch in this process committed (or was read under the
// account's lock), current through head.Version. Every fact that changes an account's
// balance, dedup claims or keys appends to the account's stream under its lock, so the state
// is exact as long as the head has not moved — which kyapi_charge checks under the lock
// before it writes anything decided from it, together with the keys' states.
type accountState struct {
	balance int64
	head    eventstore.Head // its Position is the head event's
	// claimsDay is the account's claims_day: the UTC day of its newest charge ("" if none).
	claimsDay string
	// keys are the states of the account's keys the meter has read; never changed once stored
	// (a newer state gets a new map), so a batch may read them without the lock.
	keys map[string]batchKey
}

// DefaultMaxAccounts bounds the accounts a meter keeps the state of (MeterOptions.MaxAccounts):
// some 300 bytes each. Past it, the cache starts over and accounts are read again under their
// locks when next charged.
const DefaultMaxAccounts = 200_000

// stateCache holds the accountState of the accounts this process charges.
type stateCache struct {
	mu       sync.Mutex
	accounts map[string]*accountState
	max      int
}

func newStateCache(max int) *stateCache {
	if max <= 0 {
		max = DefaultMaxAccounts
	}
	return &stateCache{accounts: map[string]*accountState{}, max: max}
}

// get returns the account's state, or nil.
func (c *stateCache) get(id string) *accountState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.accounts[id]
}

// put stores a state; the cache never holds more than its bound.
func (c *stateCache) put(id string, s *accountState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.accounts[id]; !ok && len(c.accounts) >= c.max {
		clear(c.accounts)
	}
	c.accounts[id] = s
}

// forget drops accounts whose state is no longer known (a batch's outcome was lost, or its
// writes failed).
func (c *stateCache) forget(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		delete(c.accounts, id)
	}
}

// held is how many accounts the cache holds.
func (c *stateCache) held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.accounts)
}
