package domain

import (
	"errors"
	"time"
)

// The ways ParseInstant refuses a text.
var (
	ErrInstantSyntax = errors.New("not an RFC 3339 date-time")
	ErrInstantOffset = errors.New("the offset is outside -23:59 to +23:59")
	ErrInstantYear   = errors.New("in UTC the instant falls outside the years 0000 to 9999")
)

// ParseInstant reads an RFC 3339 date-time (fractional seconds allowed) as RFC 3339 has it,
// which is narrower than time.Parse: the offset's hours run 00 to 23 and its minutes 00 to
// 59 (time.Parse also takes +24:00, which encoding/json cannot write back, and +05:60, which
// is +06:00 under another name). The instant's UTC year must fall in 0000–9999, so that it
// can be written back in UTC (9999-12-31T23:00:00-05:00 is in the year 10000 there).
func ParseInstant(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, ErrInstantSyntax
	}
	// time.Parse has checked the shape: the text ends in Z or in ±hh:mm.
	if n := len(s); s[n-1] != 'Z' && s[n-1] != 'z' {
		if hh, mm := s[n-5:n-3], s[n-2:]; hh > "23" || mm > "59" {
			return time.Time{}, ErrInstantOffset
		}
	}
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		return time.Time{}, ErrInstantYear
	}
	return t, nil
}
