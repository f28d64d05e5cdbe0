package bleveindex

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/blevesearch/bleve/v2/index/scorch"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// A segment file of the index with bytes overwritten while no process had it open is refused at
// Open, wherever the bytes are. zap reads a segment through its memory map as it is asked, and
// checks nothing of its content as it opens: the index opened, and the damage showed only when
// a query read it, as an error of every search or list that did (a 500 to the caller: "error
// loading chunk", "memUvarintReader overflow"), for as long as the index was not rebuilt, and a
// merge copied the damaged bytes into a new segment. Each segment's footer holds the CRC-32 of
// all it holds before it.
func TestASegmentWithBytesOverwrittenIsRefusedAtOpen(t *testing.T) {
	pristine := buildPristineIndex(t)
	store := filepath.Join("gen-000001", "store")
	segments := segmentsInUse(t, pristine)
	if len(segments) == 0 {
		t.Fatal("the index uses no segment file")
	}
	for _, name := range segments {
		info, err := os.Stat(filepath.Join(pristine, store, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, at := range []int64{64, info.Size() / 4, info.Size() / 2, info.Size() * 3 / 4, info.Size() - 40} {
			dir := filepath.Join(t.TempDir(), "placeindex")
			if out, err := exec.Command("cp", "-a", pristine, dir).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			path := filepath.Join(dir, store, name)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i := at; i < at+8; i++ {
				b[i] ^= 0xFF
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			x, err := Open(dir)
			if err == nil {
				x.Close()
				t.Errorf("segment %s (%d bytes) with bytes %d..%d overwritten was opened; want it refused", name, info.Size(), at, at+7)
			}
		}
	}
}

// segmentsInUse are the names of the segment files the index under dir reads (those of the
// snapshot bleve opens).
func segmentsInUse(t *testing.T, dir string) []string {
	t.Helper()
	x, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	in, err := x.cur.bleve.Advanced()
	if err != nil {
		t.Fatal(err)
	}
	r, err := in.Reader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var names []string
	for _, s := range r.(*scorch.IndexSnapshot).Segments() {
		p, ok := s.Segment().(interface{ Path() string })
		if !ok {
			t.Fatalf("segment %d is not a file", s.Id())
		}
		names = append(names, filepath.Base(p.Path()))
	}
	t.Logf("segments in use: %v", names)
	return names
}

// buildPristineIndex is an index of 3,000 places written in 5 batches, closed.
func buildPristineIndex(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "placeindex")
	x, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for b := range 5 {
		var docs []placeindex.Doc
		for i := range 600 {
			docs = append(docs, placeindex.Doc{PlaceID: fmt.Sprintf("p%05d", b*600+i), Name: fmt.Sprintf("Place %d", i), Category: "food.diner",
				TownSlug: "berea", Location: &placeindex.GeoPoint{Lat: 37 + float64(i)/1000, Lng: -84}, Version: 1})
		}
		if err := x.Upsert(t.Context(), docs, nil, fmt.Sprintf("cp%d", b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}
