package archive_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// The restore's COMMIT can be answered with an error after the server committed it (a
// connection cut then). Restore answered that error, and kyapi restore said nothing was
// restored, though the range was back in the store and its archive forgotten (restoring it
// again is refused as restored already). Now the store is asked, as archive asks it of its
// drop: restored, Restore says so; a COMMIT that never reached the server is still an error,
// with nothing restored.
func TestARestoreWhoseCommitAnswerIsLostSaysWhetherItRestored(t *testing.T) {
	h := newHistory(t, 1200, 300)
	total := count(t, h.pool, `SELECT count(*) FROM events`)
	opts := h.options(t, 2000)
	if _, err := archive.Archive(ctx, h.pool, opts); err != nil {
		t.Fatal(err)
	}
	cutter, url := pgtest.NewCommitCutter(t, h.pool.Config().ConnString())
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	cutter.Arm(pgtest.CutBeforeCommit)
	if _, err := archive.Restore(ctx, pool, opts.File); err == nil || cutter.Fired() != pgtest.CutBeforeCommit {
		t.Fatalf("restore whose COMMIT never reached the server: %v (cut %d)", err, cutter.Fired())
	}
	if n := count(t, h.pool, `SELECT count(*) FROM event_archives`); n != 1 {
		t.Fatalf("%d archives recorded after a restore that did not commit, want 1", n)
	}

	cutter.Arm(pgtest.CutAfterCommit)
	res, err := archive.Restore(ctx, pool, opts.File)
	if cutter.Fired() != pgtest.CutAfterCommit {
		t.Fatalf("no COMMIT was cut (%d)", cutter.Fired())
	}
	if err != nil {
		t.Fatalf("restore whose COMMIT the server committed: %v", err)
	}
	if res.Events != 1000 {
		t.Fatalf("restored %+v, want 1000 events", res)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM events`); n != total {
		t.Fatalf("%d events after the restore, want %d", n, total)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM event_archives`); n != 0 {
		t.Fatalf("%d archives recorded after the restore", n)
	}
	auditClean(t, h.pool, audit.Options{})
}
