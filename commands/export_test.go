package commands

// ClaimEventsSQL lets a test EXPLAIN the meter's read of an account's charges.
const ClaimEventsSQL = claimEventsSQL

// ClaimsHeld is how many dedup claims the meter keeps in memory.
func (m *Meter) ClaimsHeld() int { return m.claims.held() }
