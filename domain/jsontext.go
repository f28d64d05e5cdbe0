package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"unicode/utf8"
)

// CheckJSONText reports the first thing in b that encoding/json would silently change
// rather than refuse: bytes that are not UTF-8, and \u escapes of lone UTF-16 surrogates.
// encoding/json turns both into U+FFFD, so two different payment references, outage ids or
// names would decode to one string. Syntax errors are left to the decoder.
func CheckJSONText(b []byte) error {
	if at, problem := jsonTextProblem(b); at >= 0 {
		if problem == notUTF8 {
			return fmt.Errorf("byte %d %s", at, problem)
		}
		return fmt.Errorf("byte %d: %s", at, problem)
	}
	return nil
}

const notUTF8 = "is not UTF-8 (JSON text must be UTF-8)"

// jsonTextProblem is CheckJSONText's finding: where in b, and what (-1 and "" for none).
func jsonTextProblem(b []byte) (int, string) {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i, notUTF8
		}
		i += size
	}
	pairedLow := -1 // where the low half of a pair read with its high half is
	for at, r := range jsonUEscapes(b) {
		switch {
		case at == pairedLow:
		case r >= 0xDC00 && r <= 0xDFFF:
			return at, fmt.Sprintf("\\u%04x is half of a UTF-16 surrogate pair, alone", r)
		case r >= 0xD800 && r <= 0xDBFF:
			if low, ok := hex4(b, at+8); !ok || b[at+6] != '\\' || b[at+7] != 'u' || low < 0xDC00 || low > 0xDFFF {
				return at, fmt.Sprintf("\\u%04x is half of a UTF-16 surrogate pair, alone", r)
			}
			pairedLow = at + 6
		}
	}
	return -1, ""
}

// jsonFieldAt names the value of the JSON text b that holds the byte at offset, as catalog
// errors name fields ("name", "menu[2].name"); "" when it is not inside a value the decoder
// reads (a name, or text the decoder refuses).
func jsonFieldAt(b []byte, offset int) string {
	type frame struct {
		array bool
		key   string
		index int
	}
	var stack []frame
	path := func() string {
		var p strings.Builder
		for _, f := range stack {
			if f.array {
				fmt.Fprintf(&p, "[%d]", f.index)
				continue
			}
			if p.Len() > 0 {
				p.WriteByte('.')
			}
			p.WriteString(f.key)
		}
		return p.String()
	}
	wantKey := false // the next string in the innermost object is a name
	done := func() { // a value of the innermost container ended
		if n := len(stack); n > 0 {
			if stack[n-1].array {
				stack[n-1].index++
			} else {
				wantKey = true
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{})
				wantKey = true
			case '[':
				stack = append(stack, frame{array: true})
				wantKey = false
			default:
				stack = stack[:len(stack)-1]
				done()
			}
		default:
			if wantKey && len(stack) > 0 {
				if offset >= int(start) && offset < int(dec.InputOffset()) {
					return ""
				}
				stack[len(stack)-1].key, wantKey = t.(string), false
				continue
			}
			if offset >= int(start) && offset < int(dec.InputOffset()) {
				return path()
			}
			done()
		}
	}
}

// jsonUEscapes yields the offset and value of every \uXXXX escape inside the strings of the
// JSON text b. A backslash before anything else escapes one character; a \u without four
// hexadecimal digits is not an escape the decoder accepts, and is left to it.
func jsonUEscapes(b []byte) iter.Seq2[int, rune] {
	return func(yield func(int, rune) bool) {
		inString := false
		for i := 0; i < len(b); i++ {
			switch c := b[i]; {
			case !inString:
				inString = c == '"'
			case c == '"':
				inString = false
			case c == '\\' && i+1 < len(b):
				if r, ok := hex4(b, i+2); ok && b[i+1] == 'u' {
					if !yield(i, r) {
						return
					}
					i += 5
					continue
				}
				i++ // the escaped character
			}
		}
	}
}

// hex4 is the value of the four hexadecimal digits at b[at:], if there are four.
func hex4(b []byte, at int) (rune, bool) {
	if at < 0 || at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
