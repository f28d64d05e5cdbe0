package readapi

import (
	"maps"
	"math"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
)

// townAliases are the short town names resolved to canonical slugs (docs/api.md, "Places").
// Keys are lower case.
var townAliases = map[string]string{
	"lexington":     "lexington-fayette-urban-county",
	"louisville":    "louisville-jefferson-county-metro-government-balance",
	"bowling green": "bowling-green",
}

// ResolveTown turns a town parameter into the canonical slug prefix it is matched by:
// an alias resolves case-insensitively; a value made only of what a slug holds (a-z, 0-9,
// '-', in any case) passes through unchanged, so every canonical slug the import accepts
// works directly ("mount--vernon" too); any other name is slugified ("Bowling Green" gives
// "bowling-green"). ""
// (the parameter absent or blank) means any town. A name with no letter or digit a slug
// can hold ("!!!", "東京") resolves to unmatchableTown: it matches nothing, like any other
// town the catalog does not have, rather than being dropped and answering every town.
func ResolveTown(town string) string {
	key := strings.Join(strings.Fields(strings.ToLower(town)), " ")
	if slug, ok := townAliases[key]; ok {
		return slug
	}
	if domain.IsSlug(key) {
		return key
	}
	if slug := domain.Slugify(key); slug != "" || key == "" {
		return slug
	}
	return unmatchableTown
}

// unmatchableTown is a prefix no town slug has: slugs are made of a-z, 0-9 and '-'.
const unmatchableTown = "~"

// paramLimits is the longest value, in characters (after percent-decoding, as JSON Schema's
// maxLength counts), of each query parameter a data route reads, and of the place id in the
// path. A longer parameter is refused with 400 bad_request naming it, before anything is looked
// up or charged; a town can be any slug the import accepts (catalog ids are at most 128
// characters). A longer place id is no place the catalog can hold: 404 not_found, as for any
// unknown place, without a lookup. docs/limits.md and the OpenAPI document list the same
// numbers.
var paramLimits = map[string]int{
	"town": 128, "q": 200,
	"limit": 20, "offset": 20,
	"lat": 32, "lng": 32, "radius": 32,
	"from": 32, "to": 32,
	"placeId": 128,
}

// ParamLimits returns a copy of the length limits, by parameter name (placeId for the path).
func ParamLimits() map[string]int { return maps.Clone(paramLimits) }

// checkParams refuses, naming the parameter, a request whose query string does not parse (a
// pair with ';' or a broken %-escape: url.Values would drop it silently, and a filter dropped
// is an unfiltered, paid answer), one that gives a parameter the route reads more than once,
// and one whose parameter is longer than paramLimits allows; a place id longer than that is
// an unknown place (404).
func checkParams(r *http.Request, params []string) error {
	if len(params) > 0 { // a route that reads no parameter drops nothing
		q, err := httpx.Query(r, params...)
		if err != nil {
			return err
		}
		for _, name := range params {
			if limit := paramLimits[name]; utf8.RuneCountInString(q.Get(name)) > limit {
				return httpx.BadParam(name, "must be at most %d characters", limit)
			}
		}
	}
	// After the parameters: a bad request is 400 before an unknown place is 404.
	if id, ok := placeIDVar(r); ok && utf8.RuneCountInString(id) > paramLimits["placeId"] {
		return errPlaceNotFound(id)
	}
	return nil
}

// placeIDVar is the route's place id, percent-decoded: the router matches the path as sent,
// so that an encoded '/' stays inside the id rather than choosing another route.
func placeIDVar(r *http.Request) (string, bool) {
	raw, ok := mux.Vars(r)["placeId"]
	if !ok {
		return "", false
	}
	if id, err := url.PathUnescape(raw); err == nil {
		return id, true
	}
	return raw, true
}

// intParam reads an optional integer in [lo, hi]. Out of range is an error, never clamped.
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	s, ok := lookup(q, name)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, httpx.BadParam(name, "must be an integer from %d to %d", lo, hi)
	}
	return n, nil
}

// floatParam reads a finite number in [lo, hi]; with loOpen the lower bound is excluded.
// A missing parameter gives def, or an error when required.
// decimalNumber is a number as JSON writes it (a leading + allowed): ParseFloat alone also
// reads hexadecimal floats (0x58.99p0), which no client means as a coordinate.
var decimalNumber = regexp.MustCompile(`^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$`)

func floatParam(q url.Values, name string, required bool, def, lo, hi float64, loOpen bool) (float64, error) {
	s, ok := lookup(q, name)
	if !ok {
		if required {
			return 0, httpx.BadParam(name, "is required")
		}
		return def, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	bad := err != nil || !decimalNumber.MatchString(s) || math.IsNaN(v) || math.IsInf(v, 0)
	if !bad {
		vsLo, vsHi := cmpExact(s, v, lo), cmpExact(s, v, hi)
		bad = vsLo < 0 || vsHi > 0 || (loOpen && vsLo == 0)
		if !bad && loOpen && v == lo {
			// Above lo, but too close to it for a float64 (a radius of 1e-400): the nearest
			// float64 that is above it too.
			v = math.Nextafter(lo, hi)
		}
	}
	if bad {
		open := "["
		if loOpen {
			open = "("
		}
		return 0, httpx.BadParam(name, "must be a number in %s%g, %g]", open, lo, hi)
	}
	return v, nil
}

// cmpExact compares the number s (decimalNumber), read as v, with the bound b by its exact
// decimal value: ParseFloat rounds, and a value just outside a bound (90.0000000000000001)
// rounds onto it, one just above 0 (1e-400) to 0. Rounding keeps order and b is a float64, so
// only a v equal to b needs the exact value.
func cmpExact(s string, v, b float64) int {
	switch {
	case v < b:
		return -1
	case v > b:
		return 1
	case b == 0: // the sign of s, whatever its exponent
		mantissa, _, _ := strings.Cut(strings.ToLower(s), "e")
		if strings.Trim(mantissa, "+-.0") == "" {
			return 0
		}
		if mantissa[0] == '-' {
			return -1
		}
		return 1
	}
	// v is b, so s has a modest exponent and, at most paramLimits long, at most 32 digits:
	// 256 bits hold it closely enough to tell it from b.
	x, _, err := big.ParseFloat(s, 10, 256, big.ToNearestEven)
	if err != nil {
		return 0
	}
	return x.Cmp(big.NewFloat(b))
}

// dateParam reads an optional calendar date, YYYY-MM-DD.
func dateParam(q url.Values, name string, def time.Time) (time.Time, error) {
	s, ok := lookup(q, name)
	if !ok {
		return def, nil
	}
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, httpx.BadParam(name, "must be a date YYYY-MM-DD")
	}
	return d, nil
}

// lookup returns a parameter's value; an empty value counts as absent.
func lookup(q url.Values, name string) (string, bool) {
	s := strings.TrimSpace(q.Get(name))
	return s, s != ""
}
