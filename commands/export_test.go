package commands

// ClaimEventsSQL lets a test EXPLAIN the meter's read of an account's charges.
const ClaimEventsSQL = claimEventsSQL
