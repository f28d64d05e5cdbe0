package console

import (
	"html/template"
	"strconv"
	"strings"
	"time"
)

// pageNames are the page templates; each is parsed with layout.html.
var pageNames = []string{"signin", "error", "accounts", "account", "issued", "revoke", "purchase", "bonus", "bonus-review", "import", "system"}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"whenp": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"day":     func(t time.Time) string { return t.UTC().Format("Jan 2") },
	"credits": groupDigits,
	"delta": func(n int64) string {
		if n > 0 {
			return "+" + groupDigits(n)
		}
		return groupDigits(n)
	},
	"path": func(s string) string { return template.URLQueryEscaper(s) },
}

// groupDigits writes 1234567 as 1,234,567.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func parsePages() map[string]*template.Template {
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		out[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html"))
	}
	return out
}
