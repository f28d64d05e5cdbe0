package bleveindex

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// A root.bolt cut short while no process had the index open is refused with an error, at every
// length short of the pages its meta names, and opens at that length. bbolt maps the file and
// reads the pages its meta names without looking at the file's length: a page past the end
// faulted (SIGBUS, or SIGSEGV past the mapping), and the fault killed the whole process with a
// goroutine dump, which no recover catches. Which lengths faulted depended on where bleve's
// commits had put the freelist and root pages, so a test of one length crashed only sometimes.
func TestARootBoltCutShortIsRefusedAtEveryLength(t *testing.T) {
	pristine := filepath.Join(t.TempDir(), "placeindex")
	x, err := Open(pristine)
	if err != nil {
		t.Fatal(err)
	}
	for b := range 5 {
		var docs []placeindex.Doc
		for i := range 600 {
			docs = append(docs, placeindex.Doc{PlaceID: fmt.Sprintf("p%05d", b*600+i), Name: fmt.Sprintf("Place %d", i), Category: "food.diner",
				TownSlug: "berea", Location: &placeindex.GeoPoint{Lat: 37 + float64(i)/1000, Lng: -84}, Version: 1})
		}
		if err := x.Upsert(context.Background(), docs, nil, fmt.Sprintf("cp%d", b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	bolt := filepath.Join("gen-000001", "store", "root.bolt")
	f, err := os.Open(filepath.Join(pristine, bolt))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := newestBoltMeta(f)
	f.Close()
	if !ok || m.pages < 3 {
		t.Fatalf("the pristine root.bolt's meta: %+v, %v; want a valid one naming more than its two meta pages", m, ok)
	}
	t.Logf("root.bolt: %d pages of %d bytes, root page %d, freelist page %d", m.pages, m.pageSize, m.root, m.freelist)
	for pages := uint64(2); pages <= m.pages; pages++ {
		dir := filepath.Join(t.TempDir(), "placeindex")
		if out, err := exec.Command("cp", "-a", pristine, dir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		if err := os.Truncate(filepath.Join(dir, bolt), int64(pages*m.pageSize)); err != nil {
			t.Fatal(err)
		}
		x, err := Open(dir)
		if pages == m.pages {
			if err != nil {
				t.Errorf("root.bolt cut to the %d pages its meta names: %v; want it opened", pages, err)
			} else if cp, err := x.Checkpoint(context.Background()); err != nil || cp != "cp4" {
				t.Errorf("root.bolt cut to the %d pages its meta names: checkpoint %q, %v; want cp4", pages, cp, err)
			}
		} else if err == nil {
			t.Errorf("root.bolt cut to %d of the %d pages its meta names was opened; want it refused", pages, m.pages)
		}
		if x != nil {
			x.Close()
		}
	}
}
