package eventstore

import (
	"testing"
	"time"
)

// BenchmarkEventHash hashes a charge event of the meter's usual size: every appended event
// and every audited one goes through EventHash.
func BenchmarkEventHash(b *testing.B) {
	payload := []byte(`{"op": "detail", "key": "key_0123456789ab", "paid": ["place:plc_f7e47f713586"], "after": 4711, "delta": -1}`)
	meta := []byte(`{"request_id": "req_0123456789abcdef"}`)
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var prev [32]byte
	b.ReportAllocs()
	for b.Loop() {
		prev = EventHash(prev, "account-acc_0123456789ab", 42, "RequestCharged", payload, meta, at)
	}
}
