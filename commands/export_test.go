package commands

import "slices"

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
