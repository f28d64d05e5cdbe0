package readapi_test

import (
	"net/http"
	"testing"

	"github.com/kyapi/kyapi/eventstore"
)

// docs/api.md, "Rate limit": the rate-limit headers are on every answer to an authenticated
// request, and a revoked key's 403 is no such answer: answered from the key cache it carries
// none. The same key revoked a moment ago on another process (the cache has not heard yet), whose
// 403 is found when the key is read again before a 404 or a 429, carried X-RateLimit-* and
// RateLimit as if it had been served: a quota of a key that has none.
func TestARevokedKeysAnswerCarriesNoRateLimitHeadersWhicheverWayItWasFound(t *testing.T) {
	s := newStack(t)
	s.listenForKeys()
	account, key := s.customer(500)
	perMinute := int64(2)
	if err := s.accounts.SetRateLimit(ctx, account, &perMinute, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	s.get(key, "/api/data/places/no-such-place").expectError(t, http.StatusNotFound, "not_found") // cached
	// The revoke's notification has not arrived: the row changes without one.
	if _, err := s.pool.Exec(ctx, `UPDATE api_keys SET state = 'revoked' WHERE account_id = $1`, account); err != nil {
		t.Fatal(err)
	}
	noRateHeaders := func(what string, r response) {
		t.Helper()
		r.expectError(t, http.StatusForbidden, "revoked_api_key")
		for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := r.Header.Get(h); v != "" {
				t.Errorf("%s: the revoked key's 403 carries %s: %q", what, h, v)
			}
		}
	}
	noRateHeaders("before a 404", s.get(key, "/api/data/places/no-such-place")) // the last of its 2
	noRateHeaders("before a 429", s.get(key, "/api/data/towns"))
}
