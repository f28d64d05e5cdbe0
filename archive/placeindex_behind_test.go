package archive_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/syncbuf"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
)

// placesAndCharges is a history of the places given, then 700 charges, every SQL projection
// caught up: kyapi archive may take its oldest positions, which no place index has seen.
func placesAndCharges(t *testing.T, ids ...string) *history {
	t.Helper()
	h := newHistory(t, 600, 300)
	var body strings.Builder
	for _, id := range ids {
		body.WriteString(`{"record":"place","place_id":"` + id + `","name":"` + id + `","category":"food"}` + "\n")
	}
	imp := commands.ImportCatalog{Store: eventstore.New(h.pool), Clock: h.now}
	if _, err := imp.Handle(ctx, strings.NewReader(body.String()), eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	for i := range 700 {
		h.charge(t, h.big, i)
	}
	catchUp(t, h.pool)
	return h
}

// A place index found its next range (a new process's, catching up from nothing), and an
// archive dropped the range's events before it read them: it read the range empty and moved
// its checkpoint past the archive, the places missing from it for good.
func TestARangeFoundBeforeAnArchiveDroppedItIsNotAppliedEmpty(t *testing.T) {
	h := placesAndCharges(t, "plc_a", "plc_b")
	x, err := bleveindex.Open(filepath.Join(t.TempDir(), "placeindex"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	pi := projections.PlaceIndex{Pool: h.pool, Index: x}
	end, n, err := eventstore.NextBatchOf(ctx, h.pool, eventstore.Position{}, pi.MaxBatch(), []string{domain.EventPlaceImported})
	if err != nil || n != 2 {
		t.Fatalf("the next range: %v, %d events, %v", end, n, err)
	}
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2000)); err != nil {
		t.Fatal(err)
	}
	err = pi.Handle(ctx, eventstore.Position{}, end)
	if !errors.Is(err, eventstore.ErrArchived) {
		t.Errorf("applying a range whose events were archived meanwhile: %v, want ErrArchived", err)
	}
	cp, err := pi.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp != (eventstore.Position{}) {
		t.Errorf("the index's checkpoint moved to %v past events it never read", cp)
	}
	if res, err := x.List(ctx, placeindex.ListQuery{Limit: 10}); err != nil || res.Total != 0 {
		t.Errorf("the index holds %d places (%v)", res.Total, err)
	}
}

// A running process whose place index is behind an archive (kyapi archive cannot see it)
// stays where it is until the range is restored; it polled silently, its lag the only sign.
// It says so in its log.
func TestARunningPlaceIndexBehindAnArchiveLogsIt(t *testing.T) {
	h := placesAndCharges(t, "plc_a")
	x, err := bleveindex.Open(filepath.Join(t.TempDir(), "placeindex"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2000)); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	log := logrus.New()
	log.SetOutput(&out)
	runner := &projections.Runner{Pool: h.pool, Projections: []projections.Projection{projections.PlaceIndex{Pool: h.pool, Index: x}}, Log: log}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := runner.Start(rctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = runner.Close() }()
	// A guard against a hang, not a time limit: the first attempt logs.
	for guard := time.Now().Add(time.Minute); !strings.Contains(out.String(), "archived"); {
		if time.Now().After(guard) {
			t.Fatalf("the place index is stuck behind the archive, and the process logged nothing of it in a minute: %q", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := out.String(); !strings.Contains(s, "level=error") || !strings.Contains(s, "place") {
		t.Errorf("the log line names neither the projection nor an error: %q", s)
	}
	if cp, err := x.Checkpoint(ctx); err != nil || cp != "" {
		t.Errorf("the index's checkpoint %q (%v): it applied nothing", cp, err)
	}
}

// A place index whose checkpoint's event was archived since is still this store's: its
// checkpoint is a position of the store's history, which the archive holds.
func TestAPlaceIndexWhoseCheckpointWasArchivedIsClaimed(t *testing.T) {
	h := placesAndCharges(t, "plc_a", "plc_b")
	x, err := bleveindex.Open(filepath.Join(t.TempDir(), "placeindex"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	pi := projections.PlaceIndex{Pool: h.pool, Index: x}
	end, n, err := eventstore.NextBatchOf(ctx, h.pool, eventstore.Position{}, 2, []string{domain.EventPlaceImported})
	if err != nil || n != 2 {
		t.Fatalf("the next range: %v, %d events, %v", end, n, err)
	}
	if err := pi.Handle(ctx, eventstore.Position{}, end); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2000)); err != nil {
		t.Fatal(err)
	}
	if got := count(t, h.pool, `SELECT count(*) FROM events WHERE position = $1`, end.Pos); got != 0 {
		t.Fatalf("the archive left the checkpoint's event %v in the store", end)
	}
	if err := pi.Claim(ctx); err != nil {
		t.Errorf("Claim of an index whose checkpoint %v was archived: %v", end, err)
	}
}
