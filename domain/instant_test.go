package domain_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
)

// RFC 3339 offsets run from -23:59 to +23:59; time.Parse takes +24:00 and +05:60 too, and
// one-digit hours and a comma before the fraction, and refuses a lower-case t or z.
func TestParseInstantTakesOnlyWhatRFC3339Allows(t *testing.T) {
	for s, want := range map[string]error{
		"2026-12-01T10:00:00Z":             nil,
		"2026-12-01T10:00:00.123456789Z":   nil,
		"2026-12-01T10:00:00+23:59":        nil,
		"2026-12-01T10:00:00-23:59":        nil,
		"2026-12-01T10:00:00+05:30":        nil,
		"0000-01-01T00:00:00Z":             nil,
		"2026-12-01T10:00:00+24:00":        domain.ErrInstantOffset,
		"2026-12-01T10:00:00-24:00":        domain.ErrInstantOffset,
		"2026-12-01T10:00:00+23:60":        domain.ErrInstantOffset,
		"2026-12-01T10:00:00+05:60":        domain.ErrInstantOffset,
		"9999-12-31T23:00:00-05:00":        domain.ErrInstantYear,
		"0000-01-01T00:00:00+01:00":        domain.ErrInstantYear,
		"2026-12-01":                       domain.ErrInstantSyntax,
		"2026-12-01T10:00:00":              domain.ErrInstantSyntax,
		"2026-12-01 10:00:00Z":             domain.ErrInstantSyntax,
		"":                                 domain.ErrInstantSyntax,
		"2026-12-01T10:00:00+0500":         domain.ErrInstantSyntax,
		"2026-13-01T10:00:00Z":             domain.ErrInstantSyntax,
		"2026-12-01T10:00:00.123456789+05": domain.ErrInstantSyntax,
		"2026-12-01T1:00:00Z":              domain.ErrInstantSyntax, // a one-digit hour
		"2026-12-01T01:00:00,5Z":           domain.ErrInstantSyntax, // a comma before the fraction
		"2026-12-01T01:00:00.Z":            domain.ErrInstantSyntax,
		"2026-12-01T23:59:60Z":             domain.ErrInstantSyntax, // a leap second
		"2026-12-01T10:00:00+05:00 ":       domain.ErrInstantSyntax,
		"2026-12-01t10:00:00z":             nil, // RFC 3339 allows t and z
		"2026-12-01T10:00:00.5-00:00":      nil,
	} {
		got, err := domain.ParseInstant(s)
		if !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("%q: %v, want %v", s, err, want)
			continue
		}
		if want == nil {
			if back, _ := time.Parse(time.RFC3339Nano, strings.ToUpper(s)); !got.Equal(back) {
				t.Errorf("%q: read as %v", s, got)
			}
			if _, err := got.UTC().MarshalJSON(); err != nil {
				t.Errorf("%q: cannot be written back: %v", s, err)
			}
			if _, err := got.MarshalJSON(); err != nil {
				t.Errorf("%q: cannot be written back with its offset: %v", s, err)
			}
		}
	}
}
