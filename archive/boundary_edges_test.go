package archive_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
)

// An archived store audits clean however the audit is cut: ranges starting or ending exactly
// at the boundary (one ending before it is refused, as it reads no event), an account audit of
// an account archived entirely, an account audit of one with events after its boundary, tiny
// segments.
func TestRangeAndAccountAuditsAtTheBoundaryAreClean(t *testing.T) {
	h := newHistory(t, 1200, 300)
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2000)); err != nil {
		t.Fatal(err)
	}
	var firstHot int64
	if err := h.pool.QueryRow(ctx, `SELECT min(position) FROM events`).Scan(&firstHot); err != nil {
		t.Fatal(err)
	}
	var bigBoundary int64
	if err := h.pool.QueryRow(ctx, `SELECT b.position FROM stream_boundaries b JOIN streams s USING (stream_no) WHERE s.stream_id = $1`,
		domain.AccountStream(h.big.id)).Scan(&bigBoundary); err != nil {
		t.Fatal(err)
	}
	for _, o := range []audit.Options{
		{FromPosition: 1000}, {FromPosition: 1001}, {FromPosition: firstHot}, {FromPosition: bigBoundary}, {FromPosition: bigBoundary + 1},
		{FromPosition: 1, ToPosition: 1001}, {ToPosition: firstHot},
		{AccountID: h.small.id}, {AccountID: h.big.id}, {AccountID: h.big.id, FromPosition: 1001},
		{SegmentEvents: 1, Workers: 2}, {AccountID: h.big.id, SegmentEvents: 1},
	} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) { auditClean(t, h.pool, o) })
	}
	// A range ending before the boundary holds no event the audit reads: refused, not clean.
	for _, o := range []audit.Options{{FromPosition: 1, ToPosition: 1000}, {ToPosition: 1000}} {
		if _, err := audit.Run(ctx, h.pool, o); !errors.Is(err, audit.ErrRangeArchived) {
			t.Errorf("audit %+v, wholly archived: %v; want it refused as archived", o, err)
		}
	}
}

// Balance-at is exact at the boundary's instants, and at the time of the first hot event when
// it equals the last archived one's.
func TestBalanceAtTheBoundaryInstantsIsExact(t *testing.T) {
	h := newHistory(t, 1200, 300)
	ledger, _ := wholeLedger(t, h, h.big.id, 0)
	want := func(at time.Time) int64 {
		var b int64
		for _, e := range ledger {
			if !e.RecordedAt.After(at) {
				b = e.BalanceAfter
			}
		}
		return b
	}
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2000)); err != nil {
		t.Fatal(err)
	}
	_, skipped := wholeLedger(t, h, h.big.id, 0)
	last := skipped.RecordedAt
	next := ledger[skipped.Facts].RecordedAt
	for _, at := range []time.Time{last, last.Add(time.Microsecond), last.Add(time.Nanosecond), next.Add(-time.Microsecond), next, next.Add(time.Nanosecond),
		ledger[0].RecordedAt.Add(-time.Microsecond)} {
		got, err := h.views.BalanceAt(ctx, h.big.id, at)
		if err != nil || got != want(at) {
			t.Errorf("balance at %s: %d, %v; want %d", at.Format(time.RFC3339Nano), got, err, want(at))
		}
	}
	// Small account: archived entirely.
	small, _ := h.views.Account(ctx, h.small.id, h.now())
	got, err := h.views.BalanceAt(ctx, h.small.id, h.now())
	if err != nil || got != small.Balance {
		t.Errorf("balance-at now of the account archived entirely: %d, %v; want %d", got, err, small.Balance)
	}
	var ae *domain.ArchivedError
	if _, err := h.views.BalanceAt(ctx, h.big.id, last.Add(-time.Microsecond)); !errors.As(err, &ae) {
		t.Errorf("balance-at just before the last archived fact: %v; want archived", err)
	}
}

// A boundary records its last archived event (migration 0020), and restore puts the
// boundaries before a range back with theirs, from the file's start states. A boundary
// recorded before that migration (the four columns NULL, in a range archived before it) is trusted as
// recorded: the store audits and verifies clean, archives on from it and restores around it
// (docs/operations.md, "Retention and archiving").
func TestBoundariesRecordTheirLastEventAndOlderOnesAreTrustedAsRecorded(t *testing.T) {
	h := newHistory(t, 2300, 0)
	withoutEvent := func() int64 {
		return count(t, h.pool, `SELECT count(*) FROM stream_boundaries WHERE prev_hash IS NULL`)
	}
	first, second := h.options(t, 1001), h.options(t, 2001)
	for _, o := range []archive.Options{first, second} {
		if _, err := archive.Archive(ctx, h.pool, o); err != nil {
			t.Fatal(err)
		}
		if n := withoutEvent(); n != 0 {
			t.Fatalf("%d boundaries recorded without their last event", n)
		}
	}
	if _, err := archive.Restore(ctx, h.pool, second.File); err != nil {
		t.Fatal(err)
	}
	if n := withoutEvent(); n != 0 {
		t.Fatalf("%d boundaries restored without their last event", n)
	}
	auditClean(t, h.pool, audit.Options{})

	// Boundaries as an archive run before migration 0020 left them: without their last event,
	// in ranges archived before that migration was applied.
	asBeforeMigration0020(t, h)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d, err := audit.TakeDigest(ctx, h.pool, key, h.now())
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := audit.VerifyDigest(ctx, h.pool, d, 2); err != nil || len(rep.Differences) != 0 {
		t.Fatalf("verifying a digest over boundaries without their last event: %v, %v", rep.Differences, err)
	}
	again := h.options(t, 2001)
	if _, err := archive.Archive(ctx, h.pool, again); err != nil {
		t.Fatalf("archiving on from boundaries without their last event: %v", err)
	}
	// The big account's boundary moved on and records its event; the small account's, archived
	// whole in the first range, stays as it was.
	if n := count(t, h.pool, `SELECT count(*) FROM stream_boundaries b JOIN streams s USING (stream_no)
		WHERE s.stream_id = $1 AND b.prev_hash IS NULL`, domain.AccountStream(h.big.id)); n != 0 {
		t.Fatal("a boundary archived on from an older one does not record its last event")
	}
	auditClean(t, h.pool, audit.Options{})
	for _, f := range []string{again.File, first.File} {
		if _, err := archive.Restore(ctx, h.pool, f); err != nil {
			t.Fatalf("restoring %s: %v", f, err)
		}
		auditClean(t, h.pool, audit.Options{})
	}
}
