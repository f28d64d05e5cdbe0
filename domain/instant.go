package domain

import (
	"errors"
	"strings"
	"time"
)

// The ways ParseInstant refuses a text.
var (
	ErrInstantSyntax = errors.New("not an RFC 3339 date-time")
	ErrInstantOffset = errors.New("the offset is outside -23:59 to +23:59")
	ErrInstantYear   = errors.New("in UTC the instant falls outside the years 0000 to 9999")
)

// ParseInstant reads an RFC 3339 date-time (fractional seconds allowed) as RFC 3339 has it,
// which is not what time.Parse takes: the shape is checked first (two-digit hours, a '.'
// before a fraction, 'T' and 'Z' in either case), the offset's hours run 00 to 23 and its
// minutes 00 to 59 (time.Parse also takes +24:00, which encoding/json cannot write back, and
// +05:60, which is +06:00 under another name). The instant's UTC year must fall in
// 0000–9999, so that it can be written back in UTC (9999-12-31T23:00:00-05:00 is in the year
// 10000 there). A leap second (:60) is refused: Go's time cannot hold it.
func ParseInstant(s string) (time.Time, error) {
	if !rfc3339Shape(s) {
		return time.Time{}, ErrInstantSyntax
	}
	s = strings.ToUpper(s)
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, ErrInstantSyntax
	}
	if n := len(s); s[n-1] != 'Z' {
		if hh, mm := s[n-5:n-3], s[n-2:]; hh > "23" || mm > "59" {
			return time.Time{}, ErrInstantOffset
		}
	}
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		return time.Time{}, ErrInstantYear
	}
	return t, nil
}

// rfc3339Shape tells whether s is shaped as RFC 3339's date-time: YYYY-MM-DDTHH:MM:SS, an
// optional '.' and digits, then Z or ±HH:MM (T and Z in either case). Ranges are time.Parse's.
func rfc3339Shape(s string) bool {
	const head = "dddd-dd-ddTdd:dd:dd"
	if len(s) < len(head)+1 {
		return false
	}
	for i := 0; i < len(head); i++ {
		c := s[i]
		switch head[i] {
		case 'd':
			if c < '0' || c > '9' {
				return false
			}
		case 'T':
			if c != 'T' && c != 't' {
				return false
			}
		default:
			if c != head[i] {
				return false
			}
		}
	}
	rest := s[len(head):]
	if rest[0] == '.' {
		i := 1
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 1 {
			return false
		}
		rest = rest[i:]
	}
	switch {
	case rest == "Z" || rest == "z":
		return true
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		for _, i := range []int{1, 2, 4, 5} {
			if rest[i] < '0' || rest[i] > '9' {
				return false
			}
		}
		return true
	}
	return false
}
