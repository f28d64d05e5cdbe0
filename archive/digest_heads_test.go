package archive_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// A digest holds every stream's head as of its position (docs/operations.md). A dormant
// account whose history is archived entirely, and that is appended to while the digest is
// taken, has its archived boundary as its head at the digest's position: the digest holds it,
// so that a forged boundary is found, not left out of the digest.
func TestADigestTakenWhileADormantArchivedAccountWakesCoversIt(t *testing.T) {
	// The purchase must commit while the digest waits, after it read its position; the wait
	// is brought about, not observed, so a try that misses it goes again on a fresh store.
	for range 3 {
		if digestWhileAnArchivedAccountWakes(t) {
			return
		}
	}
	t.Fatal("in three tries the purchase never committed while the digest waited")
}

// digestWhileAnArchivedAccountWakes runs the test once; reached is false when the purchase
// did not commit after the digest read its position (nothing was checked then).
func digestWhileAnArchivedAccountWakes(t *testing.T) (reached bool) {
	h := newHistory(t, 1200, 300)
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2000)); err != nil {
		t.Fatal(err)
	}
	smallStream := domain.AccountStream(h.small.id)
	if n := count(t, h.pool, `SELECT count(*) FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = $1`, smallStream); n != 0 {
		t.Fatalf("the small account still has %d events in the store; the test needs its history archived", n)
	}
	archivedVersion := count(t, h.pool, `SELECT version FROM streams WHERE stream_id = $1`, smallStream)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	// Any transaction running when the digest starts makes SettledPosition wait for it (that is
	// its job); the small account's purchase commits meanwhile, after the position was read.
	other, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	// A later transaction ends (as on any live database), so that SettledPosition waits for
	// the one still running.
	exec(t, h.pool, `SELECT pg_current_xact_id()`)
	type result struct {
		d   audit.Digest
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := audit.TakeDigest(ctx, h.pool, key, h.now())
		done <- result{d, err}
	}()
	time.Sleep(500 * time.Millisecond)
	if _, err := (commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}).Purchase(ctx, h.small.id, 500, "wake-up", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	other.Rollback(ctx)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	d := r.d
	purchaseAt := count(t, h.pool, `SELECT head_position FROM streams WHERE stream_id = $1`, smallStream)
	if purchaseAt <= d.Position {
		t.Logf("the purchase (position %d) is covered by the digest (position %d): the interleaving was not reached", purchaseAt, d.Position)
		return false
	}
	t.Logf("digest position %d, purchase at %d, archived version %d", d.Position, purchaseAt, archivedVersion)
	var head *audit.DigestHead
	for i := range d.Heads {
		if d.Heads[i].Stream == smallStream {
			head = &d.Heads[i]
		}
	}
	if head == nil || head.Version != archivedVersion {
		t.Errorf("digest at position %d: head of %s (versions 1 to %d, all at or below the position, archived) is %+v; want version %d",
			d.Position, smallStream, archivedVersion, head, archivedVersion)
	}

	// What the omission lets through: the boundary's chain hash forged and the one event after it
	// re-chained onto it (the insider also moves the head), which a digest covering the stream
	// names as re-chained.
	var forged [32]byte
	copy(forged[:], "forged archived history.........")
	var e eventstore.Event
	var payload, meta string
	if err := h.pool.QueryRow(ctx, `SELECT e.version, e.type, e.payload::text, e.metadata::text, e.recorded_at FROM events e JOIN streams s USING (stream_no)
		WHERE s.stream_id = $1 ORDER BY e.position LIMIT 1`, smallStream).Scan(&e.Version, &e.Type, &payload, &meta, &e.RecordedAt); err != nil {
		t.Fatal(err)
	}
	next := eventstore.EventHash(forged, smallStream, e.Version, e.Type, []byte(payload), []byte(meta), e.RecordedAt)
	exec(t, h.pool, `UPDATE stream_boundaries b SET hash = $2 FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, smallStream, forged[:])
	exec(t, h.pool, `BEGIN; SET LOCAL session_replication_role = replica;
		UPDATE events e SET hash = '\x`+hexOf(next)+`' FROM streams s WHERE s.stream_no = e.stream_no AND s.stream_id = '`+smallStream+`';
		UPDATE streams SET head_hash = '\x`+hexOf(next)+`' WHERE stream_id = '`+smallStream+`'; COMMIT`)
	var out strings.Builder
	rep, err := audit.Run(ctx, h.pool, audit.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	drep, err := audit.VerifyDigest(ctx, h.pool, d, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) == 0 && len(drep.Differences) == 0 {
		t.Errorf("the archived history of %s was re-chained onto a forged boundary: audit and digest (position %d) both clean", smallStream, d.Position)
	}
	t.Logf("audit: %s\ndigest: %v", out.String(), drep.Differences)
	return true
}

func hexOf(b [32]byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 64)
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}
