package domain

import "unsafe"

// decodeCompactFact reads the compact form of a metered event as the meter writes it
// (RequestCharged's short names, both d and b present) without encoding/json: these are
// nearly every event of the store, and every projection, audit and ledger read decodes them.
// It accepts only plain JSON it can read exactly: keys of the compact form, each once;
// integers without fraction or exponent; strings of printable ASCII without escapes; arrays
// of such strings; whitespace anywhere JSON allows it. Anything else (another key, an escape,
// a non-ASCII byte, null, a duplicate) returns ok false, and the caller decodes the payload
// with encoding/json, which gives the same fact for every payload this accepts.
func decodeCompactFact(typ string, p []byte) (f AccountFact, ok bool) {
	return decodeCompactFactInto(typ, p, nil)
}

// decodeCompactFactInto is decodeCompactFact; with a non-nil lists, the resource strings alias p
// and the lists take their room from *lists (see DecodeAccountFactBorrowing).
func decodeCompactFactInto(typ string, p []byte, lists *[]string) (f AccountFact, ok bool) {
	s := compactScanner{b: p, lists: lists}
	if !s.byte('{') {
		return f, false
	}
	f.Type = typ
	var seen uint8
	const (
		seenK = 1 << iota
		seenOp
		seenPaid
		seenDedup
		seenOmitted
		seenD
		seenB
	)
	if s.peek() == '}' {
		return f, false // no d and b: not the compact form
	}
	for {
		key, ok := s.raw()
		if !ok || !s.byte(':') {
			return f, false
		}
		var bit uint8
		switch string(key) {
		case "k":
			bit = seenK
			if f.KeyNo, ok = s.smallInt(); !ok {
				return f, false
			}
		case "op":
			bit = seenOp
			v, ok := s.raw()
			if !ok {
				return f, false
			}
			f.Operation = operationOf(v)
		case "paid":
			bit = seenPaid
			if f.Paid, ok = s.strs(); !ok {
				return f, false
			}
		case "dedup":
			bit = seenDedup
			if f.Deduplicated, ok = s.strs(); !ok {
				return f, false
			}
		case "omitted":
			bit = seenOmitted
			if f.OmittedUnpaid, ok = s.smallInt(); !ok {
				return f, false
			}
		case "d":
			bit = seenD
			if f.CreditsDelta, ok = s.int(); !ok {
				return f, false
			}
		case "b":
			bit = seenB
			if f.BalanceAfter, ok = s.int(); !ok {
				return f, false
			}
		default:
			return f, false
		}
		if seen&bit != 0 {
			return f, false
		}
		seen |= bit
		switch s.next() {
		case ',':
			continue
		case '}':
			s.space()
			if s.i != len(s.b) || seen&(seenD|seenB) != seenD|seenB {
				return f, false
			}
			return f, true
		default:
			return f, false
		}
	}
}

// compactScanner reads the JSON decodeCompactFact accepts; every method skips the
// whitespace before what it reads and reports false on anything else.
type compactScanner struct {
	b []byte
	i int
	// lists, when not nil, is where strs puts its strings, and they alias b.
	lists *[]string
}

func (s *compactScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *compactScanner) peek() byte {
	s.space()
	if s.i == len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *compactScanner) next() byte {
	c := s.peek()
	if c != 0 {
		s.i++
	}
	return c
}

func (s *compactScanner) byte(c byte) bool { return s.next() == c }

// raw reads a string of printable ASCII without escapes, and returns its bytes within b.
func (s *compactScanner) raw() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i:s.i]
			s.i++
			return v, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// strs reads an array of raw's strings; [] is an empty, not a nil, slice (as encoding/json).
// With s.lists, the strings alias b and are appended to *s.lists.
func (s *compactScanner) strs() ([]string, bool) {
	if !s.byte('[') {
		return nil, false
	}
	var own []string
	list := &own
	if s.lists != nil {
		list = s.lists
	}
	start := len(*list)
	if s.peek() == ']' {
		s.i++
		return listFrom(*list, start), true
	}
	for {
		v, ok := s.raw()
		if !ok {
			return nil, false
		}
		if s.lists != nil {
			*list = append(*list, unsafe.String(unsafe.SliceData(v), len(v)))
		} else {
			*list = append(*list, string(v))
		}
		switch s.next() {
		case ',':
		case ']':
			return listFrom(*list, start), true
		default:
			return nil, false
		}
	}
}

// listFrom is l from start on, capped so that appending to it cannot touch what follows.
func listFrom(l []string, start int) []string {
	if l == nil {
		return []string{}
	}
	return l[start:len(l):len(l)]
}

// int reads a JSON integer: an optional minus, then 0 or digits not starting with 0; no
// fraction or exponent, and within int64.
func (s *compactScanner) int() (int64, bool) {
	s.space()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == digits || s.b[digits] == '0' && s.i-digits > 1 {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	var u uint64 // the magnitude; more than 19 digits is out of range
	if s.i-digits > 19 {
		return 0, false
	}
	for _, c := range s.b[digits:s.i] {
		u = u*10 + uint64(c-'0')
	}
	if digits > start { // negative
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// smallInt is int for a Go int field.
func (s *compactScanner) smallInt() (int, bool) {
	n, ok := s.int()
	return int(n), ok && n == int64(int(n))
}
