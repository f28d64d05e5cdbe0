package bleveindex_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/disktest"
	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
)

// smallDisk is an 8 MiB disk the test can fill (disktest.Small).
func smallDisk(t *testing.T) (dir string, fill, free func()) {
	t.Helper()
	return disktest.Small(t, 8)
}

func cafes(from, to int) []placeindex.Doc {
	var docs []placeindex.Doc
	for i := from; i < to; i++ {
		docs = append(docs, placeindex.Doc{PlaceID: fmt.Sprintf("p%04d", i), Name: fmt.Sprintf("Cafe %d", i), Category: "food.cafe",
			Location: &placeindex.GeoPoint{Lat: 37, Lng: -85}, RatingCount: i})
	}
	return docs
}

// counts are what the index finds of the cafes: by list without q, by geo search, and by
// list with q ("PANIC" or the error when that search fails).
func counts(idx *bleveindex.Index) (list, near int, withQ string) {
	ctx := context.Background()
	res, err := idx.List(ctx, placeindex.ListQuery{Limit: 1})
	list = res.Total
	if err != nil {
		list = -1
	}
	res, err = idx.Near(ctx, placeindex.GeoQuery{Center: placeindex.GeoPoint{Lat: 37, Lng: -85}, RadiusKm: 1, Limit: 1})
	near = res.Total
	if err != nil {
		near = -1
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				withQ = fmt.Sprintf("PANIC %v", r)
			}
		}()
		res, err := idx.List(ctx, placeindex.ListQuery{Q: "cafe", Limit: 1})
		withQ = fmt.Sprint(res.Total)
		if err != nil {
			withQ = err.Error()
		}
	}()
	return list, near, withQ
}

// A batch that bleve takes into its index but cannot write to disk (the disk full) is in the
// index it serves, checkpoint included: the places it holds must be found by every query, not
// by text alone. Re-offered, the batch is skipped as applied (its checkpoint is reached), so
// the grid and the ranking are filled now or never. Once space is back, bleve writes it, and a
// reopened index holds it.
func TestABatchTheDiskCannotTakeIsFoundByEveryQueryAndWrittenOnceSpaceIsBack(t *testing.T) {
	ctx := context.Background()
	disk, fill, free := smallDisk(t)
	dir := filepath.Join(disk, "placeindex")
	idx, err := bleveindex.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { idx.Close() }()
	if err := idx.Upsert(ctx, cafes(0, 100), nil, "c1"); err != nil {
		t.Fatal(err)
	}
	fill()
	err = idx.Upsert(ctx, cafes(100, 200), nil, "c2")
	t.Logf("upsert while the disk is full: %v", err)
	if cp, _ := idx.Checkpoint(ctx); cp != "c2" {
		t.Fatalf("checkpoint %q after the batch bleve took", cp)
	}
	if list, near, _ := counts(idx); list != 200 || near != 200 {
		t.Errorf("while the disk is full: list without q finds %d, geo search %d; want the 200 places the index holds", list, near)
	}

	free()
	deadline := time.Now().Add(time.Minute)
	for {
		_, _, withQ := counts(idx)
		if withQ == "200" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("once space is back, list with q: %s", withQ)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if list, near, _ := counts(idx); list != 200 || near != 200 {
		t.Errorf("once space is back: list without q finds %d, geo search %d; want 200", list, near)
	}
	if err := idx.Close(); err != nil {
		t.Fatal(err)
	}
	if idx, err = bleveindex.Open(dir); err != nil {
		t.Fatal(err)
	}
	if list, near, withQ := counts(idx); list != 200 || near != 200 || withQ != "200" {
		t.Errorf("reopened: list %d, geo search %d, with q %s; want 200 each", list, near, withQ)
	}
}

// While the disk is full, bleve's text search of a segment it failed to write can panic
// inside bleve: the place index cannot answer, which is the read API's 503 that charges
// nothing (domain.ErrUnavailable), not a panic answered 500 as a bug.
func TestASearchWhileTheDiskIsFullIsUnavailableNotAPanic(t *testing.T) {
	ctx := context.Background()
	disk, fill, _ := smallDisk(t)
	idx, err := bleveindex.Open(filepath.Join(disk, "placeindex"))
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	if err := idx.Upsert(ctx, cafes(0, 100), nil, "c1"); err != nil {
		t.Fatal(err)
	}
	fill()
	_ = idx.Upsert(ctx, cafes(100, 200), nil, "c2")
	var res placeindex.Result
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		res, err = idx.List(ctx, placeindex.ListQuery{Q: "cafe", Limit: 1})
	}()
	if err != nil && !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("list with q while the disk is full: %v; want its answer or domain.ErrUnavailable", err)
	}
	t.Logf("list with q while the disk is full: %d, %v", res.Total, err)
}
