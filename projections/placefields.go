package projections

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodeIndexedFields is json.Unmarshal of a PlaceImported payload into indexedFields, and
// gives the same result for any JSON text, at a fraction of the cost: a payload is mostly
// menu, review summary and sources, which json.Unmarshal checks and walks value by value
// (about 16 µs a place of the demo catalog, a tenth of a place-index rebuild), and this skips
// as bytes (BenchmarkDecodePlaceFields). The payloads
// are JSON PostgreSQL has already checked (the events' payload column is json), so the values
// of other fields are skipped without being checked. Anything it is not sure to read as
// encoding/json would — a key with an escape or a capital letter (encoding/json matches keys
// whatever their case), a value of an unexpected kind, text that is not an object — makes it
// hand the payload to json.Unmarshal; a string with escapes is handed over alone.
func decodeIndexedFields(b []byte) (indexedFields, error) {
	if f, ok := scanIndexedFields(b); ok {
		return f, nil
	}
	var f indexedFields
	err := json.Unmarshal(b, &f)
	return f, err
}

// scanIndexedFields reads the payload's top-level fields; ok is false when it cannot be sure
// of the result.
func scanIndexedFields(b []byte) (f indexedFields, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return f, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return f, skipSpace(b, i+1) == len(b)
	}
	for {
		key, next, plain := scanString(b, i)
		if !plain || !lowerKey(key) {
			return f, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return f, false
		}
		i = skipSpace(b, i+1)
		end := skipValue(b, i)
		if end < 0 {
			return f, false
		}
		if !f.set(string(key), b[i:end]) {
			return f, false
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return f, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return f, skipSpace(b, i+1) == len(b)
		default:
			return f, false
		}
	}
}

// set reads v, the raw value of the field named key, into f; false when it cannot be sure
// to read it as encoding/json would. Other fields are ignored, as json.Unmarshal does.
func (f *indexedFields) set(key string, v []byte) bool {
	var str *string
	var dst **string
	switch key {
	case "place_id":
		str = &f.PlaceID
	case "name":
		str = &f.Name
	case "category":
		str = &f.Category
	case "town_slug":
		dst = &f.TownSlug
	case "description":
		dst = &f.Description
	case "latitude":
		return setNumber(&f.Latitude, v, parseFloat)
	case "longitude":
		return setNumber(&f.Longitude, v, parseFloat)
	case "rating_count":
		return setNumber(&f.RatingCount, v, strconv.Atoi)
	default:
		return true
	}
	if string(v) == "null" {
		// json.Unmarshal leaves a string alone and sets a pointer to nil.
		if dst != nil {
			*dst = nil
		}
		return true
	}
	var t string
	if s, next, plain := scanString(v, 0); plain && next == len(v) && utf8.Valid(s) {
		t = string(s)
	} else if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &t) != nil {
		// A string with escapes (json.Marshal writes & as \u0026) is read by encoding/json
		// itself; anything else is not a string.
		return false
	}
	if str != nil {
		*str = t
	} else {
		*dst = &t
	}
	return true
}

// setNumber reads a JSON number (or null) into *dst as json.Unmarshal does.
func setNumber[T int | float64](dst **T, v []byte, parse func(string) (T, error)) bool {
	if string(v) == "null" {
		*dst = nil
		return true
	}
	if !jsonNumber(v) {
		return false
	}
	n, err := parse(string(v))
	if err != nil {
		return false
	}
	*dst = &n
	return true
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// jsonNumber tells whether v is a number as JSON writes one: strconv also reads "Inf", hex
// floats, leading zeros and a leading "+".
func jsonNumber(v []byte) bool {
	i := 0
	if i < len(v) && v[i] == '-' {
		i++
	}
	switch {
	case i < len(v) && v[i] == '0':
		i++
	case i < len(v) && v[i] >= '1' && v[i] <= '9':
		i = digits(v, i)
	default:
		return false
	}
	if i < len(v) && v[i] == '.' {
		if j := digits(v, i+1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		if j := digits(v, i); j > i {
			i = j
		} else {
			return false
		}
	}
	return i == len(v)
}

func digits(v []byte, i int) int {
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	return i
}

// lowerKey tells a key encoding/json can only match exactly: no capital letters (it matches
// field names whatever their case) and nothing outside ASCII (some letters fold to ASCII ones).
func lowerKey(k []byte) bool {
	for _, c := range k {
		if c >= 'A' && c <= 'Z' || c >= 0x80 {
			return false
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString reads the JSON string starting at b[i]: its content, the index after it, and
// plain — false when it holds an escape, a control character, or is not a whole string.
func scanString(b []byte, i int) (s []byte, next int, plain bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, j, false
		}
	}
	return nil, len(b), false
}

// skipValue returns the index just after the JSON value starting at b[i], or -1 when there
// is none there. It does not check the value (PostgreSQL did): it finds where it ends.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return -1
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := skipValue(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return -1 // no value at all
			}
			return j
		}
		j++
	}
	return j
}
