package audit_test

// The keys of an account whose history is archived, and of a range audit: what the audit checks
// of a key whose KeyIssued it does not read (docs/operations.md, "Retention and archiving").

import (
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// wantAll reports, for an audit's differences d, the wanted lines that are missing.
func wantAll(d string, want ...string) []string {
	var missing []string
	for _, w := range want {
		if !strings.Contains(d, w) {
			missing = append(missing, w)
		}
	}
	return missing
}

// A key rotated before the account's archive boundary, whose grace ends after it, and charged
// past that grace after the boundary, its api_keys row's grace lengthened to let the meter take
// the charge, is a difference as it is with nothing archived: by the rotation itself when it is
// the boundary's last archived event (the chain vouches for that event), and otherwise by the
// grace_until the key's row records, when the row was put back after the charge. (A row left
// lengthened, with the rotation archived before the boundary's last event, is what cannot be
// checked until the archive is restored.)
func TestAChargePastTheGraceOfAKeyRotatedBeforeTheBoundaryIsADifference(t *testing.T) {
	for _, c := range []struct {
		name               string
		rotationNotLast    bool // a purchase after the rotation: the boundary's last event is not the rotation
		putBack            bool
		factBased, rowDiff bool
	}{
		{name: "the rotation last archived, grace lengthened in api_keys", factBased: true, rowDiff: true},
		{name: "the rotation last archived, row put back after the charge", putBack: true, factBased: true},
		{name: "the rotation archived before the last event, row put back after the charge", rotationNotLast: true, putBack: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newArchivedStore(t)
			// The rotation, an hour in (v4): key 1 is in grace until archivedStart+25h.
			s.at(archivedStart.Add(time.Hour))
			if _, err := s.accounts.IssueKey(ctx, s.account, eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
			grace := archivedStart.Add(time.Hour).Add(domain.GracePeriod)
			if c.rotationNotLast {
				s.at(archivedStart.Add(90 * time.Minute))
				if _, err := s.accounts.Purchase(ctx, s.account, 500, "pay-late-"+s.account, eventstore.Metadata{}); err != nil {
					t.Fatal(err)
				}
			}
			s.fill(t, 1000) // the next events go to the second partition: after the boundary
			// Within its grace, key 1 is charged legitimately after the boundary.
			s.at(archivedStart.Add(2 * time.Hour))
			s.charge(t, s.hash1, "in-grace", nil)
			s.catchUp(t)
			if d := s.audit(t, audit.Options{}); d != "" {
				t.Fatalf("consistent store: %s", d)
			}
			// The insider lengthens key 1's grace in api_keys and charges with it an hour past
			// the grace its rotation recorded.
			s.exec(t, `UPDATE api_keys SET grace_until = grace_until + interval '30 days' WHERE key_id = $1`, s.key1ID)
			s.at(grace.Add(time.Hour))
			s.charge(t, s.hash1, "past-grace", nil)
			if c.putBack {
				s.exec(t, `UPDATE api_keys SET grace_until = $2 WHERE key_id = $1`, s.key1ID, grace)
			}
			s.catchUp(t)
			account, key := "account "+s.account+": ", "key "+s.key1ID+" (no. 1)"
			pastGrace := account + key + " was charged at or after the grace_until " + grace.Format(time.RFC3339Nano) + " its rotation at v4 recorded"
			// Control: with the rotation in the store, the whole audit names the charge.
			if d := s.audit(t, audit.Options{}); !strings.Contains(d, pastGrace) {
				t.Fatalf("control (nothing archived): differences\n%s\nwant %q", d, pastGrace)
			}

			s.archiveFirstPartition(t)
			var want []string
			if c.factBased {
				want = append(want, pastGrace)
			} else {
				want = append(want, account+key+", issued before its archived boundary, was charged at or after the grace_until "+
					grace.Format(time.RFC3339Nano)+" its api_keys row records: v")
			}
			if c.rowDiff {
				want = append(want, account+"api_keys row of "+key+" has grace_until "+grace.AddDate(0, 0, 30).Format(time.RFC3339Nano)+
					", its facts "+grace.Format(time.RFC3339Nano))
			}
			for _, o := range []audit.Options{{}, {AccountID: s.account}} {
				if d := s.audit(t, o); len(wantAll(d, want...)) > 0 {
					t.Errorf("audit %q after archiving the rotation: differences\n%s\nwant\n%s", o.AccountID, d, strings.Join(want, "\n"))
				}
			}
		})
	}
}

// The same for a revocation: a key revoked before the boundary, set active again in api_keys and
// charged after the boundary, is a difference by its KeyRevoked when that is the boundary's last
// archived event, and, once the row says revoked again, by the revoked_at the row records
// whichever archived event the KeyRevoked is.
func TestAChargeByAKeyRevokedBeforeTheBoundaryIsADifference(t *testing.T) {
	for _, c := range []struct {
		name                 string
		revocationNotLast    bool
		putBack              bool
		factBased, rowActive bool
	}{
		{name: "the revocation last archived, row set active", factBased: true, rowActive: true},
		{name: "the revocation last archived, row put back after the charge", putBack: true, factBased: true},
		{name: "the revocation archived before the last event, row put back after the charge", revocationNotLast: true, putBack: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newArchivedStore(t)
			s.at(archivedStart.Add(time.Hour))
			if err := s.accounts.RevokeKey(ctx, s.account, s.key1ID, "compromised", eventstore.Metadata{}); err != nil { // v4
				t.Fatal(err)
			}
			if c.revocationNotLast {
				s.at(archivedStart.Add(90 * time.Minute))
				if _, err := s.accounts.Purchase(ctx, s.account, 500, "pay-late-"+s.account, eventstore.Metadata{}); err != nil {
					t.Fatal(err)
				}
			}
			s.fill(t, 1000)
			s.exec(t, `UPDATE api_keys SET state = 'active', revoked_at = NULL WHERE key_id = $1`, s.key1ID)
			s.at(archivedStart.Add(2 * time.Hour))
			s.charge(t, s.hash1, "after-revoke", nil)
			if c.putBack {
				s.exec(t, `UPDATE api_keys SET state = 'revoked', revoked_at = $2 WHERE key_id = $1`, s.key1ID, archivedStart.Add(time.Hour))
			}
			s.catchUp(t)
			key := "key " + s.key1ID + " (no. 1)"
			revoked := "account " + s.account + ": " + key + " was revoked at v4 (" + archivedStart.Add(time.Hour).Format(time.RFC3339Nano) + ") and charged after it"
			if d := s.audit(t, audit.Options{}); !strings.Contains(d, revoked) {
				t.Fatalf("control (nothing archived): differences\n%s\nwant %q", d, revoked)
			}
			s.archiveFirstPartition(t)
			var want []string
			if c.factBased {
				want = append(want, revoked)
			} else {
				want = append(want, "account "+s.account+": "+key+", issued before its archived boundary, was charged at or after the revoked_at "+
					archivedStart.Add(time.Hour).Format(time.RFC3339Nano)+" its api_keys row records: v")
			}
			if c.rowActive {
				want = append(want, "account "+s.account+": api_keys row of "+key+" is active, its facts say revoked")
			}
			for _, o := range []audit.Options{{}, {AccountID: s.account}} {
				if d := s.audit(t, o); len(wantAll(d, want...)) > 0 {
					t.Errorf("audit %q after archiving the revocation: differences\n%s\nwant\n%s", o.AccountID, d, strings.Join(want, "\n"))
				}
			}
		})
	}
}

// Keys rotated and revoked before the boundary and used as their facts allow after it audit
// clean, whichever archived event the key facts are and whatever the audit's scope: neither
// the boundary's last key fact nor the api_keys rows that stand for the archived ones find
// anything in a consistent ledger.
func TestKeysRotatedAndRevokedBeforeTheBoundaryAndUsedAsAllowedAuditClean(t *testing.T) {
	for _, c := range []struct {
		name   string
		before func(t *testing.T, s *archivedStore)
	}{
		{"the rotation last archived", func(t *testing.T, s *archivedStore) {}},
		{"a purchase after the rotation", func(t *testing.T, s *archivedStore) {
			s.at(archivedStart.Add(90 * time.Minute))
			if _, err := s.accounts.Purchase(ctx, s.account, 500, "pay-late-"+s.account, eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
		}},
		{"the rotated key revoked last", func(t *testing.T, s *archivedStore) {
			s.at(archivedStart.Add(90 * time.Minute))
			if err := s.accounts.RevokeKey(ctx, s.account, s.key1ID, "retired", eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newArchivedStore(t)
			s.at(archivedStart.Add(time.Hour))
			k2, err := s.accounts.IssueKey(ctx, s.account, eventstore.Metadata{}) // key 1 in grace
			if err != nil {
				t.Fatal(err)
			}
			c.before(t, s)
			s.fill(t, 1000)
			var from int64 // the first position after the first partition: the range after the boundary
			if err := s.pool.QueryRow(ctx, `SELECT max(position) + 1 FROM events`).Scan(&from); err != nil {
				t.Fatal(err)
			}
			s.at(archivedStart.Add(2 * time.Hour))
			var revoked bool
			if err := s.pool.QueryRow(ctx, `SELECT state = 'revoked' FROM api_keys WHERE key_id = $1`, s.key1ID).Scan(&revoked); err != nil {
				t.Fatal(err)
			}
			if !revoked {
				s.charge(t, s.hash1, "in-grace", nil)
			}
			s.charge(t, domain.HashKey(k2.APIKey), "key-2", nil)
			s.at(archivedStart.Add(4 * time.Hour))
			k3, err := s.accounts.IssueKey(ctx, s.account, eventstore.Metadata{}) // key 2 in grace; key 1 revoked if it was not
			if err != nil {
				t.Fatal(err)
			}
			s.at(archivedStart.Add(5 * time.Hour))
			s.charge(t, domain.HashKey(k2.APIKey), "key-2-in-grace", nil)
			s.charge(t, domain.HashKey(k3.APIKey), "key-3", nil)
			s.catchUp(t)
			s.archiveFirstPartition(t)
			for _, o := range []audit.Options{{}, {AccountID: s.account}, {FromPosition: from}, {AccountID: s.account, FromPosition: from}} {
				if d := s.audit(t, o); d != "" {
					t.Errorf("audit %+v of a consistent archived store: differences\n%s", o, d)
				}
			}
		})
	}
}

// A range audit (-from, with or without -account) checks the charges it reads against the key
// facts it reads. A key issued before the range is known to a KeyRevoked or a rotation in the
// range by its id, and to the charges by the number they cite: its api_keys row joins the two
// (and nothing else of the row is compared), so a charge after its key's KeyRevoked, or past
// the grace its rotation recorded, both in the range, is named as by the whole audit.
func TestARangeAuditChecksChargesAgainstTheKeyFactsItReads(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, w world) (want string)
	}{
		{"charged after its KeyRevoked", func(t *testing.T, w world) string {
			keyID := keyOf(t, w, 1)
			if err := w.accounts.RevokeKey(ctx, w.account, keyID, "compromised", eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
			if _, err := w.pool.Exec(ctx, `UPDATE api_keys SET state = 'active', revoked_at = NULL WHERE key_id = $1`, keyID); err != nil {
				t.Fatal(err)
			}
			chargeAt(t, w, noon, 1) // v7
			return "account " + w.account + ": key " + keyID + " (no. 1) was revoked at v6"
		}},
		{"charged past the grace its rotation recorded", func(t *testing.T, w world) string {
			if _, err := w.accounts.IssueKey(ctx, w.account, eventstore.Metadata{}); err != nil { // v6
				t.Fatal(err)
			}
			keyID := keyOf(t, w, 1)
			grace := noon.Add(domain.GracePeriod)
			if _, err := w.pool.Exec(ctx, `UPDATE api_keys SET grace_until = grace_until + interval '1 day' WHERE key_id = $1`, keyID); err != nil {
				t.Fatal(err)
			}
			chargeAt(t, w, grace.Add(time.Hour), 1) // v7
			return "account " + w.account + ": key " + keyID + " (no. 1) was charged at or after the grace_until " + grace.Format(time.RFC3339Nano)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool := pgtest.NewPool(t)
			w := newWorld(t, pool, 2) // v1 AccountOpened, v2 KeyIssued (key 1), v3 CreditsPurchased, v4-v5 charges
			want := c.setup(t, w)
			catchUp(t, pool)
			if _, out := run(t, pool, audit.Options{}); !strings.Contains(out, want) {
				t.Fatalf("control, the whole audit: differences\n%s\nwant %q", out, want)
			}
			// The range from v3 holds the key fact (v6) and the charge after it (v7); only key 1's
			// KeyIssued (v2) is before it.
			var from int64
			if err := pool.QueryRow(ctx, `SELECT position FROM events WHERE stream_no = $1 AND version = 3`, w.caller.StreamNo).Scan(&from); err != nil {
				t.Fatal(err)
			}
			for _, o := range []audit.Options{{FromPosition: from}, {AccountID: w.account, FromPosition: from}} {
				if _, out := run(t, pool, o); !strings.Contains(out, want) {
					t.Errorf("audit -from %d -account %q: differences\n%s\nwant %q (the key fact and the charge are both in the range)", o.FromPosition, o.AccountID, out, want)
				}
			}
		})
	}
}

// Only a key issued before the archive boundary is taken for one whose KeyIssued is archived.
// A key the facts after the boundary issue, or whose api_keys row says it was issued after the
// boundary's last event, is checked as in a whole history:
//   - a charge citing key no. 2 recorded before key 2's own KeyIssued (both after the boundary)
//     is a charge by a key no KeyIssued before it issued;
//   - an api_keys row no KeyIssued backs, issued after the boundary (added by an insider and
//     charged with), is named, and so are its charges.
func TestAKeyIssuedAfterTheBoundaryIsCheckedAsInAWholeHistory(t *testing.T) {
	t.Run("charge before its key's KeyIssued", func(t *testing.T) {
		s := newArchivedStore(t)
		s.fill(t, 1000)
		// After the boundary: a charge citing key no. 2 (written as the meter is told; the
		// key that authorized it is key 1), then key 2 is issued.
		s.at(archivedStart.Add(2 * time.Hour))
		s.charge(t, s.hash1, "before-key-2", func(c *commands.Caller) { c.KeyNo = 2 })
		s.at(archivedStart.Add(3 * time.Hour))
		if _, err := s.accounts.IssueKey(ctx, s.account, eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
		s.catchUp(t)
		want := "account " + s.account + ": charged by key no. 2, which no KeyIssued before them issued"
		if d := s.audit(t, audit.Options{}); !strings.Contains(d, want) {
			t.Fatalf("control (nothing archived): differences\n%s\nwant %q", d, want)
		}
		s.archiveFirstPartition(t) // archives the account's first 3 events; the charge and key 2 stay
		for _, o := range []audit.Options{{}, {AccountID: s.account}} {
			if d := s.audit(t, o); !strings.Contains(d, want) {
				t.Errorf("audit %q with the account's first events archived: differences\n%s\nwant %q: key 2's KeyIssued is in the store, after the charge",
					o.AccountID, d, want)
			}
		}
	})
	t.Run("api_keys row added after the boundary", func(t *testing.T) {
		s := newArchivedStore(t)
		s.fill(t, 1000)
		s.at(archivedStart.Add(2 * time.Hour))
		forged := domain.HashKey("svc_live_forged-by-an-insider")
		s.exec(t, `INSERT INTO api_keys (key_id, key_no, key_hash, account_id, last4, state, issued_at)
			VALUES ('key_forged', 9, $1, $2, 'ider', 'active', $3)`, forged[:], s.account, s.now())
		s.charge(t, forged, "forged-key", nil)
		s.catchUp(t)
		row := "account " + s.account + ": api_keys row of key key_forged (no. 9) has no KeyIssued in the account's stream"
		charged := "account " + s.account + ": charged by key no. 9, which no KeyIssued before them issued"
		if d := s.audit(t, audit.Options{}); !strings.Contains(d, row) || !strings.Contains(d, charged) {
			t.Fatalf("control (nothing archived): differences\n%s\nwant %q and %q", d, row, charged)
		}
		s.archiveFirstPartition(t)
		for _, o := range []audit.Options{{}, {AccountID: s.account}} {
			if d := s.audit(t, o); len(wantAll(d, row, charged)) > 0 {
				t.Errorf("audit %q with the account's first events archived: differences\n%s\nwant %q and %q (the row's issued_at %s is after the boundary's last event, of %s)",
					o.AccountID, d, row, charged, s.now().Format(time.RFC3339), archivedStart.Format(time.RFC3339))
			}
		}
	})
}
