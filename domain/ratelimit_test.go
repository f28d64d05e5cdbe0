package domain

import "testing"

func TestAnAccountsRateLimitIsNullOrFrom1To100000(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, c := range []struct {
		limit *int64
		ok    bool
	}{
		{nil, true}, {n(1), true}, {n(60), true}, {n(100_000), true},
		{n(0), false}, {n(-1), false}, {n(100_001), false},
	} {
		if err := ValidateRateLimit(c.limit); (err == nil) != c.ok {
			t.Errorf("limit %v: error %v, want ok %v", c.limit, err, c.ok)
		}
	}
}
