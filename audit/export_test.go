package audit

// SetUsageMemoryRows lowers the usage counts the audit holds in memory, so that a test's few
// count rows go to the temporary table; it returns the function that restores the bound.
func SetUsageMemoryRows(n int) (restore func()) {
	saved := usageMemoryRows
	usageMemoryRows = n
	return func() { usageMemoryRows = saved }
}
