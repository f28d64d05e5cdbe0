package domain

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Trust tiers of a place field (docs/api.md, "Places").
const (
	TrustVerified  = "verified"
	TrustSupported = "supported"
	TrustThin      = "thin"
	TrustLow       = "low"
)

// Ages that bound the trust tiers, measured from the newest observation to now.
const (
	TrustFreshFor = 180 * 24 * time.Hour // verified needs the newest observation at most this old
	TrustStaleAt  = 365 * 24 * time.Hour // older than this is low, whatever the sources say
)

// TrustScoredFields always have an entry in field_trust, null when nothing observed them:
// every field of a place detail whose value comes from the catalog (all but place_id,
// canonical_url and field_trust itself).
var TrustScoredFields = []string{"name", "category", "address", "town_slug", "latitude", "longitude", "is_gem",
	"local_gem_score", "phone", "website", "rating", "rating_count", "seo_description", "hours", "description",
	"enrichment_tier"}

// FieldTrust is how far the API vouches for one field of a place.
type FieldTrust struct {
	Value          any        `json:"value"`
	TrustTier      *string    `json:"trustTier"`
	SourceCount    *int       `json:"sourceCount"`
	LastVerifiedAt *time.Time `json:"lastVerifiedAt"`
}

// ComputeFieldTrust scores every field that has observations, plus TrustScoredFields.
// Value comes from current (the place's value now); a field without observations gets a
// nil entry (JSON null).
//
// The rules, applied in this order:
//   - A source is one vote: when it observed a field several times, only its newest
//     observation counts. SourceCount is the number of distinct sources; LastVerifiedAt is
//     the newest observed_at of all of them.
//   - low when the newest observation is more than 365 days before now (exactly 365 days
//     is not yet low).
//   - thin when there is one source.
//   - low when the sources disagree: any two of them report different values. Values are
//     compared after normalization (case, spacing; phone numbers by their digits; websites
//     without scheme, "www." and trailing slash). "Three or more agree" (docs/api.md,
//     "Places") means all of them agree: a field that one source contradicts is not
//     verified.
//   - verified when 3 or more sources agree and the newest observation is at most 180 days
//     old (exactly 180 days still counts).
//   - supported otherwise: 2 sources agree, or 3 or more agree on an observation older
//     than 180 days.
func ComputeFieldTrust(sources map[string][]Observation, current map[string]any, now time.Time) map[string]*FieldTrust {
	out := make(map[string]*FieldTrust, len(sources)+len(TrustScoredFields))
	for _, f := range TrustScoredFields {
		out[f] = nil
	}
	for field, obs := range sources {
		out[field] = fieldTrustOf(field, obs, current[field], now)
	}
	return out
}

// PlaceFieldTrust is ComputeFieldTrust over a place's own sources and values.
func PlaceFieldTrust(p Place, now time.Time) map[string]*FieldTrust {
	return ComputeFieldTrust(p.Sources, p.FieldValues(), now)
}

// FieldValues maps the wire name of each scalar or hours field of the place to its value,
// nil when the place has none; field_trust takes its values from here.
func (p Place) FieldValues() map[string]any {
	v := map[string]any{
		"place_id":        p.PlaceID,
		"name":            p.Name,
		"category":        p.Category,
		"is_gem":          p.IsGem,
		"is_chain":        p.IsChain,
		"enrichment_tier": p.EnrichmentTier,
		"address":         nil,
		"town_slug":       catalogDeref(p.TownSlug),
		"latitude":        catalogDeref(p.Latitude),
		"longitude":       catalogDeref(p.Longitude),
		"local_gem_score": catalogDeref(p.LocalGemScore),
		"phone":           catalogDeref(p.Phone),
		"website":         catalogDeref(p.Website),
		"rating":          catalogDeref(p.Rating),
		"rating_count":    catalogDeref(p.RatingCount),
		"seo_description": catalogDeref(p.SEODescription),
		"description":     catalogDeref(p.Description),
		"hours":           nil,
	}
	if p.Address != "" {
		v["address"] = p.Address
	}
	if p.Hours != nil {
		v["hours"] = p.Hours
	}
	return v
}

func catalogDeref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func fieldTrustOf(field string, obs []Observation, value any, now time.Time) *FieldTrust {
	if len(obs) == 0 {
		return nil
	}
	latest := map[string]Observation{} // per source, its newest observation
	// Not the zero time: observations of the year 0000 are before it.
	newest := obs[0].ObservedAt
	for _, o := range obs {
		if l, ok := latest[o.Source]; !ok || o.ObservedAt.After(l.ObservedAt) {
			latest[o.Source] = o
		}
		if o.ObservedAt.After(newest) {
			newest = o.ObservedAt
		}
	}
	values := map[string]bool{}
	for _, src := range slices.Sorted(maps.Keys(latest)) {
		values[normalizeObservedValue(field, latest[src].Value)] = true
	}
	n := len(latest)
	age := now.Sub(newest)
	var tier string
	switch {
	case age > TrustStaleAt:
		tier = TrustLow
	case n == 1:
		tier = TrustThin
	case len(values) > 1:
		tier = TrustLow
	case n >= 3 && age <= TrustFreshFor:
		tier = TrustVerified
	default:
		tier = TrustSupported
	}
	at := newest.UTC()
	return &FieldTrust{Value: value, TrustTier: &tier, SourceCount: &n, LastVerifiedAt: &at}
}

// normalizeObservedValue is the form in which two observations of a field count as the
// same value: strings normalized by field (below), numbers by their exact value (1, 1.0 and
// 1e0 agree; two values apart in their 20th digit do not), anything else as JSON with sorted
// keys and such numbers.
func normalizeObservedValue(field string, raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	var s string
	switch {
	case len(raw) == 0:
		return "null"
	case len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0:
		s = string(raw[1 : len(raw)-1]) // no escapes: the text between the quotes is the string
	case raw[0] == '"':
		if json.Unmarshal(raw, &s) != nil {
			return string(raw)
		}
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		n := appendJSONNumber(nil, string(raw))
		if field != "phone" || bytes.ContainsAny(n, "-.e") {
			return string(n)
		}
		// A phone given as a JSON number (a whole one below 1e21, written out in digits): its
		// digits are the phone's, compared as written ones (a leading US 1 dropped).
		s = string(n)
	default:
		// As JSON, maps with sorted keys, so equal objects compare equal.
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if d.Decode(&v) != nil {
			return string(raw)
		}
		if b, ok := appendJSONValue(nil, v); ok {
			return string(b)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(b)
	}
	s = strings.ToLower(strings.Join(strings.Fields(s), " "))
	switch field {
	case "phone":
		digits := strings.Map(func(r rune) rune {
			if unicode.IsDigit(r) {
				return r
			}
			return -1
		}, s)
		if len(digits) == 11 && digits[0] == '1' {
			digits = digits[1:] // North American country code
		}
		return digits
	case "website":
		s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
		s = strings.TrimPrefix(s, "www.")
		return strings.TrimRight(s, "/")
	}
	return s
}

// appendJSONValue appends v as json.Marshal writes it, byte for byte, when v is made of what
// decoding JSON into an any gives (nil, bool, float64, string, []any, map[string]any), without
// its reflection: observed values are compared this way for every place a catalog projection
// renders. ok is false for anything else, which the caller marshals with encoding/json.
func appendJSONValue(b []byte, v any) (_ []byte, ok bool) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		return strconv.AppendBool(b, v), true
	case float64:
		return appendJSONFloat(b, v)
	case json.Number:
		return appendJSONNumber(b, string(v)), true
	case string:
		return appendJSONString(b, v), true
	case []any:
		b = append(b, '[')
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendJSONValue(b, x); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		var buf [16]string
		keys := buf[:0]
		for k := range v {
			keys = append(keys, k)
		}
		sortStrings(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendJSONString(b, k), ':')
			if b, ok = appendJSONValue(b, v[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

// appendJSONNumber appends the JSON number lit by its exact value, in the form encoding/json
// gives a float64 (plain from 1e-6 up to 1e21, else d.ddde±x; zero as 0) but with every digit
// of lit kept: two literals get the same bytes exactly when they are the same number. A
// literal whose exponent has more than 18 digits (the import refuses them: hugeExponent) is
// appended as it is (lowercased): never equal to another number's form, as computing its
// value would cost without bound.
func appendJSONNumber(b []byte, lit string) []byte {
	neg := strings.HasPrefix(lit, "-")
	mantissa, expText := strings.TrimPrefix(lit, "-"), ""
	if i := strings.IndexAny(mantissa, "eE"); i >= 0 {
		mantissa, expText = mantissa[:i], mantissa[i+1:]
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	significant := strings.TrimRight(digits, "0")
	if significant == "" {
		return append(b, '0')
	}
	exp := int64(0)
	if expText != "" {
		if len(strings.TrimLeft(strings.TrimLeft(expText, "+-"), "0")) > 18 {
			return append(b, strings.ToLower(lit)...)
		}
		exp, _ = strconv.ParseInt(strings.TrimPrefix(expText, "+"), 10, 64)
	}
	// |value| = significant × 10^k, and 10^(n-1+k) <= |value| < 10^(n+k).
	n := int64(len(significant))
	k := exp - int64(len(frac)) + int64(len(digits)-len(significant))
	if neg {
		b = append(b, '-')
	}
	switch {
	case n-1+k >= -6 && n+k <= 21 && k >= 0:
		b = append(b, significant...)
		for range k {
			b = append(b, '0')
		}
	case n-1+k >= -6 && n+k <= 21 && n+k > 0:
		b = append(b, significant[:n+k]...)
		b = append(append(b, '.'), significant[n+k:]...)
	case n-1+k >= -6 && n+k <= 21:
		b = append(b, "0."...)
		for range -(n + k) {
			b = append(b, '0')
		}
		b = append(b, significant...)
	default:
		b = append(b, significant[0])
		if n > 1 {
			b = append(append(b, '.'), significant[1:]...)
		}
		b = append(b, 'e')
		if n-1+k >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, n-1+k, 10)
	}
	return b
}

// appendJSONFloat is encoding/json's float64 format: the shortest form that reads back,
// in exponent form below 1e-6 and from 1e21, with a one-digit negative exponent unpadded.
func appendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b, true
}

// appendJSONString quotes s as encoding/json does: plain printable ASCII as it is, anything
// that needs escaping (quotes, backslashes, control characters, HTML's <, > and &, non-ASCII)
// through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// sortStrings sorts the few keys of an observed object in place (an insertion sort: objects
// of hours have seven keys, their ranges two).
func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
