package archive_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
)

// A partition kyapi restore puts back is as append-only as every other: TRUNCATE on it is
// refused like UPDATE and DELETE.
func TestARestoredPartitionRefusesTruncateLikeEveryOther(t *testing.T) {
	h := newHistory(t, 1200, 300)
	opts := h.options(t, 2000)
	if _, err := archive.Archive(ctx, h.pool, opts); err != nil {
		t.Fatal(err)
	}
	res, err := archive.Restore(ctx, h.pool, opts.File)
	if err != nil {
		t.Fatal(err)
	}
	var restored, other string
	if err := h.pool.QueryRow(ctx, `SELECT name FROM kyapi_event_partitions() WHERE lower_bound = $1`, res.From).Scan(&restored); err != nil {
		t.Fatal(err)
	}
	if err := h.pool.QueryRow(ctx, `SELECT name FROM kyapi_event_partitions() WHERE lower_bound > $1 ORDER BY lower_bound LIMIT 1`, res.From).Scan(&other); err != nil {
		t.Fatal(err)
	}
	before := count(t, h.pool, `SELECT count(*) FROM events`)
	for _, p := range []string{restored, other} {
		_, err := h.pool.Exec(ctx, `TRUNCATE `+p)
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "KY002" {
			t.Errorf("TRUNCATE %s: %v; want the append-only refusal (KY002)", p, err)
		}
	}
	if after := count(t, h.pool, `SELECT count(*) FROM events`); after != before {
		t.Errorf("%d events before the TRUNCATEs, %d after", before, after)
	}
}

// Digest verification starts each stream's chain at its archived boundary. A digest taken
// after an archive verifies clean on the untouched store. One taken before it verifies each
// stream the archive ends exactly at the digest's head (through the boundary's chain hash),
// and names a stream whose covered versions lie inside the archive, with more archived after
// them, as archived: not as missing or tampered.
func TestDigestsVerifyFromTheArchivedBoundary(t *testing.T) {
	h := newHistory(t, 300, 300)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	before, err := audit.TakeDigest(ctx, h.pool, key, h.now())
	if err != nil {
		t.Fatal(err)
	}
	// The big account goes on past the archived range (positions below 1,001), the small one
	// stops at the digest.
	for i := range 600 {
		h.charge(t, h.big, i)
	}
	catchUp(t, h.pool)
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2000)); err != nil {
		t.Fatal(err)
	}
	bigStream, smallStream := domain.AccountStream(h.big.id), domain.AccountStream(h.small.id)
	if n := count(t, h.pool, `SELECT count(*) FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = $1`, smallStream); n != 0 {
		t.Fatalf("the small account still has %d events in the store; the test needs its history archived", n)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = $1`, bigStream); n == 0 {
		t.Fatal("the big account has no event left in the store; the test needs it to go on past the archive")
	}

	after, err := audit.TakeDigest(ctx, h.pool, key, h.now())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.VerifyDigest(ctx, h.pool, after, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 {
		t.Errorf("a digest taken after the archive, on the same store: %d differences:\n%s", len(rep.Differences), strings.Join(rep.Differences, "\n"))
	}

	rep, err = audit.VerifyDigest(ctx, h.pool, before, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 1 || !strings.HasPrefix(rep.Differences[0], "stream "+bigStream+": archived:") {
		t.Errorf("a digest taken before the archive: differences\n%s\nwant only the big account's, archived", strings.Join(rep.Differences, "\n"))
	}

	// The boundary is where checking starts, not a pass: an event after it removed is missing.
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, sql := range []string{`SET LOCAL session_replication_role = replica`,
		`DELETE FROM events WHERE position = (SELECT min(e.position) FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = '` + bigStream + `')`} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err = audit.VerifyDigest(ctx, h.pool, after, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(rep.Differences, "\n"), "stream "+bigStream+": missing: versions") {
		t.Errorf("the big account's first event after its boundary deleted: differences %q, want it missing", rep.Differences)
	}
}
