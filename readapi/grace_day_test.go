package readapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/kyapi/kyapi/eventstore"
)

// A caller's view of rotation and of the dedup day, through the read API: the rotated key
// answers until just before its 24 hours end and is 403 revoked_api_key from then on, and a
// towns list paid at noon is free until 23:59:59 UTC and paid again at midnight.
func TestARotatedKeyWorksFor24HoursAndTheTownsListIsPaidAgainAfterUTCMidnight(t *testing.T) {
	s := newStack(t)
	id, old := s.customer(500)
	if _, m := s.get(old, "/api/data/towns").rows(t); m.CreditsUsed != 10 || m.Deduplicated == nil || *m.Deduplicated {
		t.Fatalf("first towns list: %+v, want 10 credits, not deduplicated", m)
	}
	issued, err := s.accounts.IssueKey(ctx, id, eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}

	s.clock.Advance(12*time.Hour - time.Second) // 23:59:59 UTC
	if _, m := s.get(old, "/api/data/towns").rows(t); m.CreditsUsed != 0 || m.Deduplicated == nil || !*m.Deduplicated {
		t.Fatalf("towns list at 23:59:59: %+v, want free and deduplicated", m)
	}
	s.clock.Advance(time.Second) // 00:00:00 UTC, the next day
	if _, m := s.get(issued.APIKey, "/api/data/towns").rows(t); m.CreditsUsed != 10 {
		t.Fatalf("towns list after midnight: %+v, want 10 credits", m)
	}

	s.clock.Advance(12*time.Hour - time.Second) // one second before the grace ends
	if r := s.get(old, "/api/data/towns"); r.Status != http.StatusOK {
		t.Fatalf("rotated key one second before its grace ends: %d %s", r.Status, r.Body)
	}
	s.clock.Advance(time.Second)
	s.get(old, "/api/data/towns").expectError(t, http.StatusForbidden, "revoked_api_key")
	if r := s.get(issued.APIKey, "/api/data/towns"); r.Status != http.StatusOK {
		t.Fatalf("new key after the old one's grace: %d %s", r.Status, r.Body)
	}
}
