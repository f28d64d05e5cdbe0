package commands

import (
	"slices"
	"time"
)

// ClaimEventsSQL lets a test EXPLAIN the meter's read of an account's charges.
const ClaimEventsSQL = claimEventsSQL

// LaneOf is the index of the lane that meters an account's charges.
func (m *Meter) LaneOf(accountID string) int { return slices.Index(m.lanes, m.laneOf(accountID)) }

// SetCatalogWriteBytes bounds the payload bytes of one catalog append statement, and returns
// what puts the bound back.
func SetCatalogWriteBytes(n int) (restore func()) {
	was := catalogWriteBytes
	catalogWriteBytes = n
	return func() { catalogWriteBytes = was }
}

// SetKeyChangeYield sets how long a key change yields to a pending grant, and returns what
// puts it back.
func SetKeyChangeYield(d time.Duration) (restore func()) {
	was := keyChangeYield
	keyChangeYield = d
	return func() { keyChangeYield = was }
}

// KeyChangeYield is how long a key change yields to a pending grant.
func KeyChangeYield() time.Duration { return keyChangeYield }

// SetOutcomeWait sets how long a lost commit's outcome is looked for, and returns what puts
// it back.
func SetOutcomeWait(d time.Duration) (restore func()) {
	was := outcomeWait
	outcomeWait = d
	return func() { outcomeWait = was }
}
