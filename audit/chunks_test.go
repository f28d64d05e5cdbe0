package audit_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

// The saved dedup claims (claim_chunks) are what a meter starting on an account reads instead
// of the day's charges: an edited one would have the resources it lacks charged again that
// day, or serve free what it forged. The audit compares them with the charges they save, and
// finds each edit before any meter acts on it; an honest store's chunks are clean.
func TestTheAuditFindsEditedClaimChunks(t *testing.T) {
	for _, c := range []struct {
		name, sql, want string
	}{
		{"a claim dropped", `UPDATE claim_chunks SET hashes = substr(hashes, 9) WHERE through = (SELECT min(through) FROM claim_chunks)`,
			"lack 1 resource paid by then: a meter would charge them again"},
		{"a claim forged", `UPDATE claim_chunks SET hashes = hashes || '\x0102030405060708'::bytea WHERE through = (SELECT min(through) FROM claim_chunks)`,
			"holds 1 claim of no resource paid by then: a meter would serve them free"},
		{"through moved past the head", `UPDATE claim_chunks SET through = through + 1000 WHERE through = (SELECT max(through) FROM claim_chunks)`,
			"past the stream's head"},
		{"position moved on", `UPDATE claim_chunks SET position = position + 1000000 WHERE through = (SELECT max(through) FROM claim_chunks)`,
			"a meter would skip it"},
		{"a chunk cut short", `UPDATE claim_chunks SET hashes = substr(hashes, 1, 13) WHERE through = (SELECT min(through) FROM claim_chunks)`,
			"not a whole number of 8-byte claims"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := pgtest.NewPool(t)
			w := newWorld(t, pool, 0)
			for i := range 560 { // two chunks of 240 claims, and charges after them
				w.charge(t, fmt.Sprint("p", i))
			}
			var chunks int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM claim_chunks`).Scan(&chunks); err != nil || chunks < 2 {
				t.Fatalf("%d claim chunks (%v), want at least 2", chunks, err)
			}
			catchUp(t, pool)
			if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) > 0 {
				t.Fatalf("the honest store: %s", out)
			}
			tamper(t, pool, c.sql)
			rep, out := run(t, pool, audit.Options{AccountID: w.account})
			if len(rep.Differences) == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("want a difference saying %q, got:\n%s", c.want, out)
			}
		})
	}
}

// An honest store whose database runs under DateStyle 'SQL, MDY' (supported:
// TestAnAuditUnderAnotherDateStyleIsClean) and holds a claim chunk audits clean.
func TestClaimChunksAuditCleanUnderAnotherDateStyle(t *testing.T) {
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET datestyle = ''SQL, MDY''', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	pool.Reset()
	w := newWorld(t, pool, 0)
	for i := range 250 {
		w.charge(t, fmt.Sprint("p", i))
	}
	var chunks int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM claim_chunks`).Scan(&chunks); err != nil || chunks == 0 {
		t.Fatalf("setup: %d chunks, %v", chunks, err)
	}
	catchUp(t, pool)
	rep, err := audit.Run(ctx, pool, audit.Options{})
	if err != nil || len(rep.Differences) != 0 {
		t.Fatalf("honest store under DateStyle SQL, MDY: %v %v", err, rep.Differences)
	}
}

// kyapi archive may archive a day's events from the day after next (before yesterday), while
// that day's claim chunks are still there until a serve's maintenance deletes them (every
// minute, only while a serve runs). The honest store audits clean.
func TestClaimChunksOfAnArchivedDayAuditClean(t *testing.T) {
	s := newArchivedStore(t) // day 2026-03-02
	meter := commands.NewMeter(eventstore.New(s.pool), s.now, commands.MeterOptions{})
	defer meter.Close()
	caller, err := meter.Authenticate(ctx, s.hash1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 250 {
		if _, err := meter.Charge(ctx, commands.ChargeRequest{Caller: caller, Operation: domain.OpPlaceDetail,
			Resources: []string{domain.PlaceResource(fmt.Sprint("p", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	s.fill(t, 1000)
	var chunks int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM claim_chunks`).Scan(&chunks); err != nil || chunks == 0 {
		t.Fatalf("setup: %d chunks, %v", chunks, err)
	}
	s.catchUp(t)
	if out := s.audit(t, audit.Options{}); out != "" {
		t.Fatalf("before the archive: %s", out)
	}
	parts, err := eventstore.Partitions(ctx, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range projections.SQLAppliers(time.Now) {
		names = append(names, a.Name())
	}
	// 30 s after midnight of the day after next: the 2nd is before yesterday (the 3rd).
	if _, err := archive.Archive(ctx, s.pool, archive.Options{Before: parts[0].To, File: filepath.Join(t.TempDir(), "a.jsonl.gz"),
		Now: time.Date(2026, 3, 4, 0, 0, 30, 0, time.UTC), Projections: names}); err != nil {
		t.Fatal(err)
	}
	if out := s.audit(t, audit.Options{}); out != "" {
		t.Fatalf("after an honest archive: %s", out)
	}
}
