package readapi_test

import (
	"net/http"
	"testing"
)

// A key revoked a moment ago, before this process's key cache has heard of it, gets the 403,
// not a 405, to a method the read API does not answer (docs/api.md: it re-reads the key before
// any refusal of the request itself). As in TestAKeyRevokedBehindTheCachesBackIs403BeforeA400OrA404, the row
// changes and the notification has not arrived yet.
func TestAKeyRevokedBehindTheCachesBackIs403BeforeA405(t *testing.T) {
	s := newStack(t)
	s.listenForKeys()
	account, key := s.customer(500)
	s.get(key, "/api/data/towns").rows(t) // cached now
	if _, err := s.pool.Exec(ctx, `UPDATE api_keys SET state = 'revoked' WHERE account_id = $1`, account); err != nil {
		t.Fatal(err)
	}
	// Control: a 404 re-reads the key and answers 403.
	s.get(key, "/api/data/places/no-such-place").expectError(t, http.StatusForbidden, "revoked_api_key")
	for _, m := range []string{http.MethodPost, http.MethodHead, http.MethodDelete} {
		r := s.unchecked(m, key, "/api/data/towns")
		if r.Status != http.StatusForbidden {
			t.Errorf("%s with a revoked key: %d %s, want 403 revoked_api_key", m, r.Status, r.Body)
		}
	}
}
