package readapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// Every 401 names the scheme to authenticate with in WWW-Authenticate (RFC 9110 §11.6.1: a
// server generating a 401 MUST send it; RFC 6750 §3 for Bearer): Bearer, with
// error="invalid_token" when a key was sent but is unknown, and no error when none was sent.
// A 403 for a revoked key is not a challenge to authenticate again with the same scheme, and a
// success carries none.
func TestEvery401ChallengesForABearerToken(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	cases := []struct {
		name, key, wantError string
	}{
		{"no Authorization", "", ""},
		{"an unknown key", "svc_live_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", `error="invalid_token"`},
		{"a token that is no key", "junk", `error="invalid_token"`},
	}
	for _, c := range cases {
		for _, path := range []string{"/api/data/towns", "/api/data/places/p1", "/no/such/route"} {
			r := s.unchecked(http.MethodGet, c.key, path)
			if r.Status != http.StatusUnauthorized {
				t.Fatalf("%s on %s: %d %s, want 401", c.name, path, r.Status, r.Body)
			}
			got := r.Header.Get("WWW-Authenticate")
			if !strings.HasPrefix(got, `Bearer realm="kyapi"`) {
				t.Fatalf("%s on %s: WWW-Authenticate %q, want a Bearer challenge with realm kyapi", c.name, path, got)
			}
			if c.wantError == "" && strings.Contains(got, "error=") || c.wantError != "" && !strings.Contains(got, c.wantError) {
				t.Fatalf("%s on %s: WWW-Authenticate %q, want error %q", c.name, path, got, c.wantError)
			}
		}
	}
	if r := s.get(key, "/api/data/towns"); r.Status != http.StatusOK || r.Header.Get("WWW-Authenticate") != "" {
		t.Fatalf("success: %d with WWW-Authenticate %q, want 200 with none", r.Status, r.Header.Get("WWW-Authenticate"))
	}
}
