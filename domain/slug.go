package domain

import "strings"

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
