package audit_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// An event inserted under a stream number with no row in streams — below every stream,
// between two, or above every one — belongs to no stream, and only INSERT on events is
// needed to add it (the append-only trigger refuses UPDATE, DELETE and TRUNCATE). Digest
// verification and the audit both read every number, and both report each such event,
// however the audit cuts the store into units.
func TestEventsUnderAStreamNumberWithNoStreamAreCaught(t *testing.T) {
	pool := pgtest.NewPool(t)
	newWorld(t, pool, 5)
	// Burn stream numbers so that the streams opened next leave a gap below them.
	var gap int32
	if err := pool.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('streams', 'stream_no'))::int`).Scan(&gap); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT nextval(pg_get_serial_sequence('streams', 'stream_no'))`); err != nil {
		t.Fatal(err)
	}
	newWorld(t, pool, 300)
	newWorld(t, pool, 3)
	catchUp(t, pool)
	key := newKey(t)
	d := takeDigest(t, pool, key)
	if rep, out := verify(t, pool, d); len(rep.Differences) != 0 {
		t.Fatalf("untouched store: %s", out)
	}
	var maxNo int32
	if err := pool.QueryRow(ctx, `SELECT max(stream_no) FROM streams`).Scan(&maxNo); err != nil {
		t.Fatal(err)
	}
	forged := []int32{-7, gap, maxNo + 1}
	for i, no := range forged {
		at := noon.Add(-time.Hour)
		payload, meta := []byte(`{"credits_delta":1000000,"balance_after":1000000}`), []byte(`{}`)
		h := eventstore.EventHash(eventstore.ZeroHash, "account-acc_forged", 1, "BonusGranted", payload, meta, at)
		if _, err := pool.Exec(ctx, `INSERT INTO events (position, version, recorded_at, stream_no, type, hash, payload, metadata)
			VALUES ($1, 1, $2, $3, 'BonusGranted', $4, $5, $6)`, 2+i, at, no, h[:], string(payload), string(meta)); err != nil {
			t.Fatal(err)
		}
	}
	wantAll := func(what string, diffs []string) {
		t.Helper()
		for _, no := range forged {
			if !strings.Contains(strings.Join(diffs, "\n"), fmt.Sprintf("stream number %d: inserted", no)) &&
				!strings.Contains(strings.Join(diffs, "\n"), fmt.Sprintf("#%d (a stream number with no row in streams)", no)) {
				t.Errorf("%s: the event under stream number %d is not reported; differences:\n%s", what, no, strings.Join(diffs, "\n"))
			}
		}
	}
	rep, _ := verify(t, pool, d)
	wantAll("digest verification", rep.Differences)
	// Units of at most 100 events: the 300-charge stream is cut into segments, and the gap
	// lies between units.
	for _, opts := range []audit.Options{{}, {SegmentEvents: 100}} {
		arep, _ := run(t, pool, opts)
		wantAll(fmt.Sprintf("audit (segments of %d)", opts.SegmentEvents), arep.Differences)
	}
}
