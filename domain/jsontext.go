package domain

import (
	"fmt"
	"unicode/utf8"
)

// CheckJSONText reports the first thing in b that encoding/json would silently change
// rather than refuse: bytes that are not UTF-8, and \u escapes of lone UTF-16 surrogates.
// encoding/json turns both into U+FFFD, so two different payment references, outage ids or
// names would decode to one string. Syntax errors are left to the decoder.
func CheckJSONText(b []byte) error {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("byte %d is not UTF-8 (JSON text must be UTF-8)", i)
		}
		i += size
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && i+1 < len(b):
			if b[i+1] != 'u' {
				i++ // a one-letter escape, \" included
				continue
			}
			r, ok := hex4(b, i+2)
			if !ok {
				i++ // not an escape the decoder accepts: it reports the syntax error
				continue
			}
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf("byte %d: \\u%04x is half of a UTF-16 surrogate pair, alone", i, r)
			case r >= 0xD800 && r <= 0xDBFF:
				if low, ok := hex4(b, i+8); !ok || b[i+6] != '\\' || b[i+7] != 'u' || low < 0xDC00 || low > 0xDFFF {
					return fmt.Errorf("byte %d: \\u%04x is half of a UTF-16 surrogate pair, alone", i, r)
				}
				i += 11
			default:
				i += 5
			}
		}
	}
	return nil
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
