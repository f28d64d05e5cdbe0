package domain

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// uriChars are the characters of a URI (RFC 3986): unreserved, reserved and '%'.
const uriChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$&'()*+,;=%"

// WebURI is s, an absolute http or https URL, written as a URI (RFC 3986), as the read API
// serves a place's website and a canonical_url (docs/limits.md, "Catalog import"): a host name
// holding other than ASCII in its IDNA form (punycode: café.example is xn--caf-dma.example),
// and every character a URI cannot hold percent-encoded as UTF-8 (a space as %20, a '%' that
// starts no escape as %25, a '#' after the first as %23, '[' and ']' outside an IP-literal host
// as %5B and %5D). What is written as a URI already comes back unchanged, letter for letter. A
// control character (a tab, a line break) is no part of an address: it is an error, as are a
// scheme other than http or https and a missing host.
func WebURI(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("is not UTF-8 text")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return "", fmt.Errorf("holds the control character %q", r)
		}
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || !(strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")) {
		return "", fmt.Errorf("must be an absolute http or https URL")
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if strings.IndexByte(authority, '\\') >= 0 {
		// A browser reads '\' as '/' in an http URL: the host would not be the one served.
		return "", fmt.Errorf("must be an absolute http or https URL: '\\' before the path")
	}
	userinfo, hostport := "", authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		userinfo, hostport = escapeURI(authority[:i], false)+"@", authority[i+1:]
	}
	host, port := hostport, ""
	if strings.HasPrefix(hostport, "[") {
		j := strings.IndexByte(hostport, ']')
		if j < 0 {
			return "", fmt.Errorf("must be an absolute http or https URL with a host")
		}
		host, port = hostport[:j+1], hostport[j+1:]
		if a, err := netip.ParseAddr(host[1:j]); err != nil || !a.Is6() || a.Zone() != "" {
			return "", fmt.Errorf("host %q is not an IPv6 address", host)
		}
	} else {
		if i := strings.LastIndexByte(hostport, ':'); i >= 0 {
			host, port = hostport[:i], hostport[i:]
		}
		if !isASCII(host) {
			ascii, err := idna.Lookup.ToASCII(host)
			if err != nil {
				return "", fmt.Errorf("host %q is not an international domain name: %v", host, err)
			}
			host = ascii
		}
		if host == "" || strings.ContainsFunc(host, func(r rune) bool {
			return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-._~!$&'()*+,;=", r))
		}) {
			return "", fmt.Errorf("must be an absolute http or https URL with a host name")
		}
	}
	if strings.Trim(port, "0123456789") != ":" && port != "" {
		return "", fmt.Errorf("must be an absolute http or https URL with a numeric port")
	}
	hostport = host + port
	out := scheme + "://" + userinfo + hostport + escapeURI(tail, true)
	u, err := url.Parse(out)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("must be an absolute http or https URL with a host")
	}
	return out, nil
}

// escapeURI percent-encodes what a URI cannot hold in s, a URI's userinfo (without the '@'
// that ends it: one inside it is escaped) or its path, query and fragment (afterHost): see
// WebURI.
func escapeURI(s string, afterHost bool) string {
	var b strings.Builder
	fragment := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b.WriteByte(c)
		case c == '#' && afterHost && !fragment:
			fragment = true
			b.WriteByte(c)
		case c == '%' || c == '#' || c == '[' || c == ']' || c == '@' && !afterHost ||
			c >= utf8.RuneSelf || strings.IndexByte(uriChars, c) < 0:
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
