package readapi

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
)

// townAliases are the short names the spec resolves to canonical slugs (api-spec
// Endpoints rule 4). Keys are lower case.
var townAliases = map[string]string{
	"lexington":     "lexington-fayette-urban-county",
	"louisville":    "louisville-jefferson-county-metro-government-balance",
	"bowling green": "bowling-green",
}

// ResolveTown turns a town parameter into the canonical slug prefix it is matched by:
// an alias resolves case-insensitively; any other name is slugified ("Bowling Green" and
// "bowling-green" give the same slug), so a canonical slug passes through unchanged. ""
// means any town.
func ResolveTown(town string) string {
	key := strings.Join(strings.Fields(strings.ToLower(town)), " ")
	if slug, ok := townAliases[key]; ok {
		return slug
	}
	return domain.Slugify(key)
}

// badParam is a query parameter that is missing, malformed or out of range: a 400
// bad_request naming the parameter.
func badParam(name, format string, args ...any) error {
	return httpx.BadRequest("parameter %q %s", name, fmt.Sprintf(format, args...))
}

// intParam reads an optional integer in [lo, hi]. Out of range is an error, never clamped.
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	s, ok := lookup(q, name)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badParam(name, "must be an integer from %d to %d", lo, hi)
	}
	return n, nil
}

// floatParam reads a finite number in [lo, hi]; with loOpen the lower bound is excluded.
// A missing parameter gives def, or an error when required.
func floatParam(q url.Values, name string, required bool, def, lo, hi float64, loOpen bool) (float64, error) {
	s, ok := lookup(q, name)
	if !ok {
		if required {
			return 0, badParam(name, "is required")
		}
		return def, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	bad := err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v > hi || v < lo || (loOpen && v == lo)
	if bad {
		open := "["
		if loOpen {
			open = "("
		}
		return 0, badParam(name, "must be a number in %s%g, %g]", open, lo, hi)
	}
	return v, nil
}

// dateParam reads an optional calendar date, YYYY-MM-DD.
func dateParam(q url.Values, name string, def time.Time) (time.Time, error) {
	s, ok := lookup(q, name)
	if !ok {
		return def, nil
	}
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, badParam(name, "must be a date YYYY-MM-DD")
	}
	return d, nil
}

// lookup returns a parameter's value; an empty value counts as absent.
func lookup(q url.Values, name string) (string, bool) {
	s := strings.TrimSpace(q.Get(name))
	return s, s != ""
}
