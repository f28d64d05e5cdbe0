package projections

// SetUsageBufferRows sets the rows a rebuild of usage sums before it writes them, until the
// returned function puts the default back.
func SetUsageBufferRows(n int) (restore func()) {
	old := usageBufferRows
	usageBufferRows = n
	return func() { usageBufferRows = old }
}

// DecodePlace is decodePlace, for the test that holds it to encoding/json.
var DecodePlace = decodePlace
