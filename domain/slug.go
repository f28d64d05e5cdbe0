package domain

import "strings"

// IsSlug tells whether s is made only of what a catalog slug holds: a-z, 0-9 and '-' (the
// import checks town slugs by it, and the read API passes such a town parameter through).
func IsSlug(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return s != ""
}

// Slugify turns a name into a slug the way the catalog's town slugs are made: lower case,
// each run of other characters becomes one "-", none at either end; apostrophes are dropped
// ("Miller's" is "millers").
func Slugify(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(c)
			dash = false
		case c == '\'':
		default:
			dash = true
		}
	}
	return b.String()
}
