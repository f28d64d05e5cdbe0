package archive_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
)

// A correct store whose archived range holds catalog streams (a place imported twice, so its
// last archived event chains to an earlier one) audits and verifies clean, whole and in small
// segments, through restore and a second archive of the same range.
func TestCatalogStreamsThroughArchiveRestoreAndArchiveAgainAuditClean(t *testing.T) {
	h := newHistory(t, 600, 300)
	imp := commands.ImportCatalog{Store: eventstore.New(h.pool), Clock: h.now}
	for _, body := range []string{
		`{"record":"place","place_id":"plc_a","name":"A","category":"food"}` + "\n" + `{"record":"place","place_id":"plc_b","name":"B","category":"food"}`,
		`{"record":"place","place_id":"plc_a","name":"A two","category":"food"}`,
	} {
		if _, err := imp.Handle(ctx, strings.NewReader(body), eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 700 {
		h.charge(t, h.big, i)
	}
	catchUp(t, h.pool)
	if n := count(t, h.pool, `SELECT count(*) FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id LIKE 'place-%' AND e.position < 1000`); n == 0 {
		t.Fatal("no place event below position 1000")
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string) {
		t.Helper()
		for _, o := range []audit.Options{{}, {SegmentEvents: 100}} {
			var out strings.Builder
			o.Out = &out
			rep, err := audit.Run(ctx, h.pool, o)
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			if len(rep.Differences) != 0 {
				t.Errorf("%s: audit (segments %d) of a correct store:\n%s", step, o.SegmentEvents, out.String())
			}
		}
		d, err := audit.TakeDigest(ctx, h.pool, key, h.now())
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		rep, err := audit.VerifyDigest(ctx, h.pool, d, 2)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if len(rep.Differences) != 0 {
			t.Errorf("%s: digest verification of a correct store:\n%s", step, strings.Join(rep.Differences, "\n"))
		}
	}
	opts := h.options(t, 2000)
	if _, err := archive.Archive(ctx, h.pool, opts); err != nil {
		t.Fatal(err)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM stream_boundaries b JOIN streams s USING (stream_no) WHERE s.stream_id LIKE 'place-%' AND b.type IS NOT NULL`); n == 0 {
		t.Fatal("no place stream has a boundary recording its last event")
	}
	check("after archive")
	if _, err := archive.Restore(ctx, h.pool, opts.File); err != nil {
		t.Fatalf("restore: %v", err)
	}
	check("after restore")
	again := h.options(t, 2000)
	if _, err := archive.Archive(ctx, h.pool, again); err != nil {
		t.Fatalf("archive again: %v", err)
	}
	check("after archiving again")
	if _, err := archive.Restore(ctx, h.pool, again.File); err != nil {
		t.Fatalf("restore again: %v", err)
	}
	check("after restoring again")
}
