package domain

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0
}
func isSubDelim(c byte) bool { return strings.IndexByte("!$&'()*+,;=", c) >= 0 }

// allPct reports whether s consists only of unreserved, sub-delims, extra and pct-encoded.
func allPct(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
		case isUnreserved(c) || isSubDelim(c) || strings.IndexByte(extra, c) >= 0:
		default:
			return false
		}
	}
	return true
}

// strictHTTPURI: RFC 3986 absolute URI, scheme http/https, hier-part "//" authority
// path-abempty, with a non-empty host (RFC 9110 4.2.1). Returns "" when fine.
func strictHTTPURI(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || !(strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")) {
		return "scheme"
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth, tail := rest[:end], rest[end:]
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		if !allPct(auth[:i], ":") {
			return "userinfo " + auth[:i]
		}
		auth = auth[i+1:]
	}
	host, port := auth, ""
	if strings.HasPrefix(auth, "[") {
		j := strings.IndexByte(auth, ']')
		if j < 0 {
			return "ip-literal unclosed"
		}
		host, port = auth[:j+1], auth[j+1:]
		lit := host[1 : len(host)-1]
		if strings.HasPrefix(lit, "v") || strings.HasPrefix(lit, "V") {
			h, t, ok := strings.Cut(lit[1:], ".")
			if !ok || h == "" || t == "" || !allPct(strings.ReplaceAll(t, "%", "x"), ":") {
				return "ipvfuture"
			}
			for k := 0; k < len(h); k++ {
				if !isHex(h[k]) {
					return "ipvfuture"
				}
			}
		} else {
			a, err := netip.ParseAddr(lit)
			if err != nil || !a.Is6() || a.Zone() != "" {
				return "ipv6 " + lit
			}
		}
		if port != "" && port[0] != ':' {
			return "after ip-literal"
		}
	} else if i := strings.IndexByte(auth, ':'); i >= 0 {
		host, port = auth[:i], auth[i:]
	}
	if port != "" {
		for k := 1; k < len(port); k++ {
			if port[k] < '0' || port[k] > '9' {
				return "port " + port
			}
		}
	}
	if host == "" {
		return "empty host"
	}
	if !strings.HasPrefix(host, "[") && !allPct(host, "") {
		return "reg-name " + host
	}
	path, query, frag := tail, "", ""
	hasQ, hasF := false, false
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path, frag, hasF = path[:i], path[i+1:], true
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path, query, hasQ = path[:i], path[i+1:], true
	}
	_ = hasQ
	_ = hasF
	if !allPct(path, ":@/") {
		return "path " + path
	}
	if !allPct(query, ":@/?") {
		return "query " + query
	}
	if !allPct(frag, ":@/?") {
		return "fragment " + frag
	}
	return ""
}

// checkWebURI fails t unless WebURI(in) is refused or is an RFC 3986 http(s) URI with a host
// that keeps a valid in letter for letter, that WebURI keeps, and that url.Parse reads back.
func checkWebURI(t *testing.T, in string) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("WebURI(%q) panics: %v", in, r)
		}
	}()
	out, err := WebURI(in)
	if err != nil {
		return
	}
	if p := strictHTTPURI(out); p != "" {
		t.Errorf("WebURI(%q) = %q: not an RFC 3986 http(s) URI with a host (%s)", in, out, p)
	}
	if strictHTTPURI(in) == "" && out != in {
		t.Errorf("WebURI(%q) = %q: a valid URI changed", in, out)
	}
	if again, err := WebURI(out); err != nil || again != out {
		t.Errorf("WebURI not idempotent: %q -> %q -> %q, %v", in, out, again, err)
	}
	if _, err := url.Parse(out); err != nil {
		t.Errorf("WebURI(%q) = %q: url.Parse: %v", in, out, err)
	}
}

// A place's website and the canonical base are served as URIs (docs/limits.md): WebURI gives an
// RFC 3986 http(s) URI with a host, or refuses. Each of these was let through before: a second
// '@' of the userinfo kept, a host holding what no host holds, an IP literal unchecked, and a
// backslash a browser reads as the end of the host (the host served would not be the one
// given).
func TestWebURIGivesAURIOrRefuses(t *testing.T) {
	for in, want := range map[string]string{
		"http://a@b@example.com/":   "http://a%40b@example.com/",
		"http://a:b@c@example.com/": "http://a:b%40c@example.com/",
	} {
		if got, err := WebURI(in); err != nil || got != want {
			t.Errorf("WebURI(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"http://ex<amp>le.com/", `http://a"b.com/`, "http://a]b/", "http://]/",
		"http://[fe80::1%25é]/", "http://[fe80::1%25<script>]/", "http://[fe80::1%25a]b]/",
		"http://a%25b/", "http://%C2%85/",
		`http://evil.com\@good.com/`,
	} {
		if got, err := WebURI(in); err == nil {
			t.Errorf("WebURI(%q) = %q; want it refused", in, got)
		}
	}
	for _, in := range webURIInputs {
		checkWebURI(t, in)
	}
}

// FuzzWebURI explores what WebURI is given (go test -fuzz FuzzWebURI ./domain/); as a test it
// runs the inputs above.
func FuzzWebURI(f *testing.F) {
	for _, in := range webURIInputs {
		f.Add(in)
	}
	f.Fuzz(checkWebURI)
}

// webURIInputs are addresses of every shape WebURI may be given: well formed and not, hosts
// that are IP literals, international names or neither, userinfo, ports, escapes.
var webURIInputs = []string{
	"http://:80", "http://@/", "http://[::1", "http://a b.com", "http://a%20b.com/", "http://a%zz.com/",
	"http://host:port", "http://host:80x", "http://üser@host/", "http://user#x@host/", "http://ho#st/",
	`http://host\path`, `http:\\host`, `http:\\\\host`, `http://host/a\b`,
	"http://a@b@host/", "http://a:b@c@host/", "http://a[b]c/", "http://a]b/", "http://a[b/", "http://a<b>.com/",
	`http://a"b.com/`, "http://a:80:90/", "http://a::/", "http://[foo]/", "http://[::1]x/", "http://[::1]:80/",
	"http://[::1%25eth0]/", "http://[v7.abc]/", "http://[::1]]/", "http://[[::1]]/", "http://[::1]:8a/",
	"http://host:/", "http://host:80/", "http://host/%", "http://host/%2", "http://host/%%41",
	"http://host?a#b#c", "http://host#a[b]", "http://ex%41mple.com/", "http://%C3%A9.com/",
	"http://café.example:80/", "http://café.example:8x/", "http://café.example:/", "http://\u00ad/", "http://\u00ad:80/",
	"http://。/", "http://café。example/", "http://ｅｘａｍｐｌｅ．ｃｏｍ/", "http://exa\uff1ample.com/", "http://a\uff20b/",
	"http://ex\uff0fample.com/", "http://ex\uff03ample.com/", "http://ex\uff1fample.com/", "http://é@host/",
	"http://user:pä@host/", "http://u%zz@host/", "http://u[1]@host/", "http://u ser@host/", "http://host/ä#ö#ü",
	"https://example.com/our menu", "http://a.b.c/", "http://-a-.com/", "http://a_b.com/", "http://a!$&'()*+,;=b.com/",
	"http://a~b.com/", "HTTP://EXAMPLE.COM/", "http://Ünï.com/", "http://xn--caf-dma.example/", "http://xn--zz/",
	"http://xn--ca-dma.ex ample/", "http://é.com:80:90/", "http://é%41.com/", "http://ex\u2024ample.com/",
	"http://1.2.3.4/", "http://1.2.3.4:65536/", "http://999.999.999.999/", "http://[::ffff:1.2.3.4]/",
	"http://host/\u2028", "http://a b@c/", "http://%/", "http://host%/", "http://[]/", "http://[:/", "http://]/",
	"http://a@[::1]/", "http://a@[::1/", "http://host:80@evil/", "http://host/?q=<x>", "http:///a", "http:// /",
	"http://\u3000/", "http://a\u3000b/", "http://a\u00a0b/", "http://a\u200bb/", "http://a\ufeffb/",
	"http://\ufffd/", "http://a\xffb/", "http://host/\xff", "http://u\xff@host/",
}
