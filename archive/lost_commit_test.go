package archive_test

import (
	"errors"
	"os"
	"testing"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
)

// The drop's COMMIT can be answered with an error after the server committed it (a connection
// cut then; a cancel while a synchronous standby is awaited). The file was then deleted: the
// range was gone from the store and from the disk, and could never be restored. Now the store
// is asked: the drop committed, so the archive stands, file and all, and restores whole.
func TestAnArchiveWhoseCommitAnswerIsLostKeepsItsFileWhenTheDropCommitted(t *testing.T) {
	h := newHistory(t, 1200, 300)
	total := count(t, h.pool, `SELECT count(*) FROM events`)
	opts := archive.WithCommitAnswer(h.options(t, 2000), func(err error) error {
		if err != nil {
			return err
		}
		return errors.New("connection reset by peer (the answer to COMMIT)")
	})
	res, err := archive.Archive(ctx, h.pool, opts)
	if err != nil {
		t.Fatalf("archive whose drop committed: %v", err)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM event_archives`); n != 1 || res.Events != 1000 {
		t.Fatalf("%d archives recorded, %d events archived", n, res.Events)
	}
	if _, err := os.Stat(opts.File); err != nil {
		t.Fatalf("the archive file of a committed drop: %v", err)
	}
	if _, err := archive.Restore(ctx, h.pool, opts.File); err != nil {
		t.Fatal(err)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM events`); n != total {
		t.Fatalf("%d events after the restore, want %d", n, total)
	}
	auditClean(t, h.pool, audit.Options{})
}
