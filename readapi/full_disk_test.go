package readapi_test

import (
	"net/http"
	"testing"
)

// A database whose disk is full refuses the charge's write (SQLSTATE 53100, "could not extend
// file ...: No space left on device") and rolls it back: the database cannot serve the request
// now, as when it is read-only or out of connections. The answer is the 503 that says nothing
// was charged, with its Retry-After, not a 500 that reads as a bug of the service; once space
// is freed the same request is served and charged.
func TestAFullDiskIsA503ThatChargesNothing(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	// PostgreSQL's own error for a relation it cannot extend, raised where the charge writes.
	if _, err := s.pool.Exec(ctx, `
		CREATE FUNCTION test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			RAISE EXCEPTION 'could not extend file "base/16384/16999": No space left on device'
				USING ERRCODE = 'disk_full', HINT = 'Check free disk space.';
		END $$;
		CREATE TRIGGER test_disk_full BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION test_disk_full();`); err != nil {
		t.Fatal(err)
	}
	r := s.get(key, "/api/data/towns")
	r.expectError(t, http.StatusServiceUnavailable, "internal")
	if got := r.Header.Get("X-Charge-Outcome"); got != "none" {
		t.Errorf("X-Charge-Outcome %q, want none", got)
	}
	if got := r.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if b := s.balance(account); b != 1000 {
		t.Fatalf("balance %d after the refused charge, want 1000", b)
	}

	if _, err := s.pool.Exec(ctx, `DROP TRIGGER test_disk_full ON events`); err != nil {
		t.Fatal(err)
	}
	_, m := s.get(key, "/api/data/towns").rows(t)
	if m.CreditsUsed != 10 || m.CreditsRemaining != 990 || s.balance(account) != 990 {
		t.Errorf("once space is freed: credits_used %d, credits_remaining %d, balance %d; want 10, 990, 990",
			m.CreditsUsed, m.CreditsRemaining, s.balance(account))
	}
}
