package commands

// ClaimsSQL lets a test EXPLAIN the meter's dedup-claim lookup.
const ClaimsSQL = claimsSQL
