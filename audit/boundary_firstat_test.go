package audit_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A boundary's first_at (the time of the stream's first event) is not hashed, yet balance-at and
// the statements trust it: they answer 0 before the account's first fact. Moved after the
// boundary's last archived event, it makes balance-at answer 0 credits for an instant at which
// the account held 998. No ledger holds a first event after its last: the check of the boundary
// names it, in the audit and in the verification of a digest, and the audit also finds that it
// is not the account's opened_at.
func TestABoundaryFirstAtMovedPastItsLastEventIsADifference(t *testing.T) {
	s := newArchivedStore(t)
	s.charge(t, s.hash1, "archived-1", nil)
	s.charge(t, s.hash1, "archived-2", nil)
	s.fill(t, 1000)
	s.archiveFirstPartition(t) // the account's whole history, v1 to v5
	views := commands.Views{Pool: s.pool}
	at := archivedStart.Add(12 * time.Hour) // after every fact of the account, all archived
	before, err := views.BalanceAt(ctx, s.account, at)
	if err != nil || before != 998 {
		t.Fatalf("setup: balance at %s: %d, %v; want 998", at, before, err)
	}
	if d := s.audit(t, audit.Options{}); d != "" {
		t.Fatalf("consistent archived store: %s", d)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := audit.TakeDigest(ctx, s.pool, key, archivedStart.AddDate(0, 1, 0))
	if err != nil {
		t.Fatal(err)
	}

	s.exec(t, `UPDATE stream_boundaries b SET first_at = b.recorded_at + interval '1 day'
		FROM streams st WHERE st.stream_no = b.stream_no AND st.stream_id = $1`, domain.AccountStream(s.account))
	after, err := views.BalanceAt(ctx, s.account, at)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("balance-at %s: %d before the edit, %d after it", at.Format(time.RFC3339), before, after)
	firstAt := archivedStart.Add(24 * time.Hour).Format(time.RFC3339Nano)
	boundary := "stream " + domain.AccountStream(s.account) + ": archived boundary v5: its first_at " + firstAt
	opened := "account " + s.account + ": write-model opened_at " + archivedStart.Format(time.RFC3339Nano) +
		", but its archived boundary says its first fact was recorded at " + firstAt + " (first_at)"
	for _, o := range []audit.Options{{}, {AccountID: s.account}} {
		if d := s.audit(t, o); len(wantAll(d, boundary, opened)) > 0 {
			t.Errorf("audit %q: differences\n%s\nwant\n%s\n%s (balance-at %s says %d, was %d)", o.AccountID, d, boundary, opened,
				at.Format(time.RFC3339), after, before)
		}
	}
	rep, err := audit.VerifyDigest(ctx, s.pool, digest, 2)
	if err != nil {
		t.Fatal(err)
	}
	if d := strings.Join(rep.Differences, "\n"); !strings.Contains(d, boundary) {
		t.Errorf("digest verification: differences\n%s\nwant %q", d, boundary)
	}
}

// An account's first fact is recorded with its accounts row, at the same instant: its
// AccountOpened's recorded_at, and the first_at of its archive boundary once that is archived,
// are its opened_at. A first_at moved earlier than that fact (balance-at then answers 410
// archived where it answered 0), or an opened_at edited, is a difference.
func TestAnAccountsFirstFactTimeIsItsOpenedAt(t *testing.T) {
	t.Run("first_at moved earlier", func(t *testing.T) {
		s := newArchivedStore(t)
		s.fill(t, 1000)
		s.archiveFirstPartition(t)
		if d := s.audit(t, audit.Options{}); d != "" {
			t.Fatalf("consistent archived store: %s", d)
		}
		s.exec(t, `UPDATE stream_boundaries b SET first_at = b.first_at - interval '1 hour'
			FROM streams st WHERE st.stream_no = b.stream_no AND st.stream_id = $1`, domain.AccountStream(s.account))
		want := "account " + s.account + ": write-model opened_at " + archivedStart.Format(time.RFC3339Nano) +
			", but its archived boundary says its first fact was recorded at " + archivedStart.Add(-time.Hour).Format(time.RFC3339Nano) + " (first_at)"
		for _, o := range []audit.Options{{}, {AccountID: s.account}} {
			if d := s.audit(t, o); !strings.Contains(d, want) {
				t.Errorf("audit %q: differences\n%s\nwant %q", o.AccountID, d, want)
			}
		}
	})
	t.Run("opened_at edited, nothing archived", func(t *testing.T) {
		pool := pgtest.NewPool(t)
		w := newWorld(t, pool, 1)
		catchUp(t, pool)
		if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
			t.Fatalf("consistent database: %s", out)
		}
		tamper(t, pool, `UPDATE accounts SET opened_at = opened_at + interval '1 day' WHERE account_id = $1`, w.account)
		want := "account " + w.account + ": write-model opened_at " + noon.Add(24*time.Hour).Format(time.RFC3339Nano) +
			", but its AccountOpened (v1) was recorded at " + noon.Format(time.RFC3339Nano)
		for _, o := range []audit.Options{{}, {AccountID: w.account}} {
			if _, out := run(t, pool, o); !strings.Contains(out, want) {
				t.Errorf("audit %q: differences\n%s\nwant %q", o.AccountID, out, want)
			}
		}
	})
}
