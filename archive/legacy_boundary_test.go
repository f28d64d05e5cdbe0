package archive_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A boundary recorded before migration 0020 records no last event and is trusted as recorded;
// which ones may be such was decided from the archive range holding the boundary's position,
// which no hash covers. An insider moved a newer boundary's position into a range archived
// before 0020 (plain UPDATEs, no trigger bypassed), dropped its recorded event and minted
// credits at it: the audit and a digest taken before passed it (found by review). Only the
// boundaries the store held without their event when migration 0028 ran are trusted so now.
func TestABoundaryMovedIntoARangeArchivedBeforeMigration0020IsNotTrustedAsOneOfIts(t *testing.T) {
	mintAtABoundaryPassedOffAsLegacy(t, `UPDATE stream_boundaries b SET position = 500 FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`)
}

// The same by stretching the old range over the newer one: a range's positions cannot change,
// and a range deleted and inserted again is dated by that insert (migration 0026); nor can the
// set of boundaries recorded before 0020 be added to.
func TestARangeArchivedBeforeMigration0020CannotBeStretchedNorItsBoundariesAddedTo(t *testing.T) {
	h := newHistory(t, 1100, 0)
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 1001)); err != nil {
		t.Fatal(err)
	}
	asBeforeMigration0020(t, h)
	for _, sql := range []string{
		`UPDATE event_archives SET to_position = to_position + 1000`,
		`UPDATE event_archives SET from_position = 2`,
		`INSERT INTO legacy_boundaries (stream_no, version, hash) VALUES (999999, 1, '\x00')`,
		`UPDATE legacy_boundaries SET version = version + 1`,
		`DELETE FROM legacy_boundaries`,
		`TRUNCATE legacy_boundaries`,
	} {
		if _, err := h.pool.Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), "KY002") {
			t.Errorf("%s: %v, want it refused (KY002)", sql, err)
		}
	}
	auditClean(t, h.pool, audit.Options{})
}

// asBeforeMigration0020 makes the boundaries of the ranges archived so far as an archive run
// before migration 0020 left them, and as migration 0028 found them: without their last event,
// in ranges archived before 0020 was applied, recorded in legacy_boundaries.
func asBeforeMigration0020(t *testing.T, h *history) {
	t.Helper()
	exec(t, h.pool, `UPDATE stream_boundaries SET prev_hash = NULL, type = NULL, payload = NULL, metadata = NULL`)
	pgtest.ExecAsOlderVersion(t, h.pool, `UPDATE event_archives SET archived_at = (SELECT applied_at - interval '1 day' FROM schema_migrations
		WHERE name = '0020_boundary_last_event.sql')`)
	pgtest.ExecAsOlderVersion(t, h.pool, `INSERT INTO legacy_boundaries (stream_no, version, hash)
		SELECT stream_no, version, hash FROM stream_boundaries WHERE prev_hash IS NULL ON CONFLICT DO NOTHING`)
	auditClean(t, h.pool, audit.Options{})
}

func mintAtABoundaryPassedOffAsLegacy(t *testing.T, move ...string) {
	const minted = 1_000_000
	h := newHistory(t, 1100, 0)
	// 1. A genuine old archive: [1, 1001), made before migration 0020, its boundaries recorded
	// by migration 0028 (simulated as TestBoundariesRecordTheirLastEventAndOlderOnesAreTrustedAsRecorded does).
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 1001)); err != nil {
		t.Fatal(err)
	}
	asBeforeMigration0020(t, h)
	auditClean(t, h.pool, audit.Options{})
	// 2. The small account's whole history after it, in positions 1001..2000, then more of the big one.
	for i := 0; i < 300; i++ {
		h.charge(t, h.small, i)
		h.charge(t, h.big, i)
	}
	for i := 0; i < 700; i++ {
		h.charge(t, h.big, i)
	}
	catchUp(t, h.pool)
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2001)); err != nil {
		t.Fatal(err)
	}
	stream := domain.AccountStream(h.small.id)
	if n := count(t, h.pool, `SELECT count(*) FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = $1`, stream); n != 0 {
		t.Fatalf("small still has %d live events", n)
	}
	b, ok, err := eventstore.BoundaryOf(ctx, h.pool, stream)
	if err != nil || !ok || b.Last == nil || b.Legacy || b.Position < 1001 {
		t.Fatalf("small's boundary: %+v %v %v", b, ok, err)
	}
	auditClean(t, h.pool, audit.Options{})
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	d, err := audit.TakeDigest(ctx, h.pool, key, h.now())
	if err != nil {
		t.Fatal(err)
	}

	// 3. The tampering: plain UPDATEs.
	st, err := archive.DecodeAccountState(b.Account)
	if err != nil {
		t.Fatal(err)
	}
	st.Balance += minted
	st.PurchasedCredits += minted
	for i := range st.Days {
		if st.Days[i].Kind == "purchase" {
			st.Days[i].Credits += minted
			break
		}
	}
	closing := ""
	for _, dd := range st.Days {
		if dd.Kind == "" && dd.Day > closing {
			closing = dd.Day
		}
	}
	for i := range st.Days {
		if st.Days[i].Kind == "" && st.Days[i].Day == closing {
			st.Days[i].BalanceAfter += minted
		}
	}
	// The archived payment list: the credited payment says more credits (its purchases row too).
	if len(st.Payments) > 0 {
		st.Payments[0].Credits += minted
		st.Payments[0].BalanceAfter += minted
		exec(t, h.pool, `UPDATE purchases SET credits_added = credits_added + $2, balance_after = balance_after + $2 WHERE payment_ref = $1`,
			st.Payments[0].PaymentRef, minted)
	}
	forged, _ := json.Marshal(st)
	for _, sql := range move {
		exec(t, h.pool, sql, stream)
	}
	exec(t, h.pool, `UPDATE stream_boundaries b SET account = $2::jsonb,
			prev_hash = NULL, type = NULL, payload = NULL, metadata = NULL
		FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, stream, string(forged))
	exec(t, h.pool, `UPDATE accounts SET balance = balance + $2, purchased_credits = purchased_credits + $2 WHERE account_id = $1`, h.small.id, minted)
	exec(t, h.pool, `UPDATE rm_balances SET balance = balance + $2, purchased_credits = purchased_credits + $2 WHERE account_id = $1`, h.small.id, minted)
	exec(t, h.pool, `UPDATE rm_account_days SET credits = credits + $2 WHERE account_id = $1 AND kind = 'purchase'`, h.small.id, minted)
	exec(t, h.pool, `UPDATE rm_account_days SET balance_after = balance_after + $2 WHERE account_id = $1 AND day = $3::date AND kind = ''`, h.small.id, minted, closing)

	lost := "archived boundary v"
	if diffs := auditDiffs(t, h, audit.Options{}); !strings.Contains(diffs, lost) || !strings.Contains(diffs, h.small.id) {
		t.Errorf("audit: %d credits minted at a boundary passed off as one recorded before migration 0020: %q", minted, diffs)
	}
	if diffs := auditDiffs(t, h, audit.Options{AccountID: h.small.id}); !strings.Contains(diffs, lost) {
		t.Errorf("account audit: %q", diffs)
	}
	if v := verifyDiffs(t, h, d); !strings.Contains(v, h.small.id) {
		t.Errorf("digest taken before the tampering: %q", v)
	}
	// The forged credits are live: the next fact chains on from them, and the audit stays clean.
	if _, err := (commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}).Purchase(ctx, h.small.id, 500, "after-forgery", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	catchUp(t, h.pool)
	if diffs := auditDiffs(t, h, audit.Options{}); !strings.Contains(diffs, h.small.id) {
		t.Errorf("audit after a purchase on top of the minted balance: %q", diffs)
	}
}
