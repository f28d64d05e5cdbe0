package bleveindex

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// A root.bolt cut short while no process had the index open is refused with an error, at every
// length short of the pages its meta names, and opens at that length. bbolt maps the file and
// reads the pages its meta names without looking at the file's length: a page past the end
// faulted (SIGBUS, or SIGSEGV past the mapping), and the fault killed the whole process with a
// goroutine dump, which no recover catches. Which lengths faulted depended on where bleve's
// commits had put the freelist and root pages, so a test of one length crashed only sometimes.
func TestARootBoltCutShortIsRefusedAtEveryLength(t *testing.T) {
	pristine := buildPristineIndex(t)
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

// A root.bolt with a page overwritten while no process had the index open is refused at Open,
// whichever page of the file's buckets it is. bleve reads only the newest of the snapshots the
// file keeps as it opens; its persister reads the older ones' pages (to delete them) in a
// goroutine of its own, where bbolt's assertion on the damaged page stopped it for good. The
// index opened, and its next batch waited for that persister for ever: serve hung catching up
// the place index, or the index stopped taking places with nothing logged, and Close waited
// behind it. A free page of the file is read by nothing: overwritten, the index opens and takes
// a batch.
func TestARootBoltWithAnyPageOverwrittenIsRefusedAtOpen(t *testing.T) {
	pristine := buildPristineIndex(t)
	bolt := filepath.Join("gen-000001", "store", "root.bolt")
	pages, pageSize := boltPageTypes(t, filepath.Join(pristine, bolt))
	var used, free int
	for id := 2; id < len(pages); id++ {
		typ := pages[id]
		if typ == "" {
			continue // within an overflow
		}
		dir := filepath.Join(t.TempDir(), "placeindex")
		if out, err := exec.Command("cp", "-a", pristine, dir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		f, err := os.OpenFile(filepath.Join(dir, bolt), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte{0xA5}, 32), int64(id*pageSize)); err != nil {
			t.Fatal(err)
		}
		f.Close()
		x, err := Open(dir)
		switch {
		case typ != "free" && err == nil:
			used++
			t.Errorf("root.bolt with its %s page %d overwritten was opened; want it refused", typ, id)
		case typ == "free" && err != nil:
			t.Errorf("root.bolt with its free page %d overwritten: %v; want it opened", id, err)
		case typ == "free":
			free++
			docs := []placeindex.Doc{{PlaceID: "p00001", Name: "Renamed", Category: "food.diner", TownSlug: "berea", Version: 2}}
			if err := x.Upsert(context.Background(), docs, nil, "cp5"); err != nil {
				t.Errorf("root.bolt with its free page %d overwritten: upsert: %v", id, err)
			} else if cp, err := x.Checkpoint(context.Background()); err != nil || cp != "cp5" {
				t.Errorf("root.bolt with its free page %d overwritten: checkpoint %q, %v after an upsert; want cp5", id, cp, err)
			}
		default:
			used++
		}
		if x != nil {
			x.Close()
		}
	}
	t.Logf("root.bolt: %d pages of %d bytes; %d in use and %d free overwritten in turn", len(pages), pageSize, used, free)
	if used == 0 {
		t.Fatal("no page of root.bolt's buckets was overwritten")
	}
}

// boltPageTypes is the type of each page of the bolt file at path as bbolt tells it ("free",
// "leaf", "branch", "meta", "freelist"), "" for the pages an overflow continues over, and its
// page size.
func boltPageTypes(t *testing.T, path string) ([]string, int) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var types []string
	err = db.View(func(tx *bbolt.Tx) error {
		for id := 0; ; id++ {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				return err
			}
			types = append(types, info.Type)
			for range info.OverflowCount {
				types = append(types, "")
				id++
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return types, db.Info().PageSize
}
