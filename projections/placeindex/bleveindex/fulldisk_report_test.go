package bleveindex_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
)

// The writes bleve retries on its own goroutines (a snapshot it could not persist) fail with
// nobody waiting for them: the failures are reported through ReportWriteFailures, the first
// at once and then at most one a minute whatever the retries, with the count left unreported;
// and a write that succeeds again is reported (a nil error).
func TestWriteFailuresAreReportedAtOnceThenAtMostOnceAMinute(t *testing.T) {
	ctx := context.Background()
	disk, fill, free := smallDisk(t)
	idx, err := bleveindex.Open(filepath.Join(disk, "placeindex"))
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	var mu sync.Mutex
	var reports []error
	idx.ReportWriteFailures(func(err error, notReported int) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, err)
	})
	if err := idx.Upsert(ctx, cafes(0, 100), nil, "c1"); err != nil {
		t.Fatal(err)
	}
	fill()
	_ = idx.Upsert(ctx, cafes(100, 200), nil, "c2")
	time.Sleep(2 * time.Second) // bleve retries meanwhile
	mu.Lock()
	got := append([]error(nil), reports...)
	mu.Unlock()
	if len(got) != 1 || got[0] == nil {
		t.Fatalf("reports while the disk is full for 2 s: %v; want one failure", got)
	}
	free()
	// Until bleve has written the segment its write failed on, a batch replacing its documents
	// fails: retried, as the projection does.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		err := idx.Upsert(ctx, cafes(150, 210), nil, "c3")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upsert once space is back: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 2 || reports[1] != nil {
		t.Fatalf("reports once a write succeeds again: %v; want the failure, then nil", reports)
	}
}

// A disk nearly full takes the small segments bleve persists for each batch but not the
// larger ones its merger writes: the merges fail, each persist succeeds. The failures are still
// logged at most once a minute (docs/operations.md, "DATA_DIR's disk full"), not once for
// every batch persisted between two failed merges.
func TestWriteFailuresBetweenSuccessfulWritesAreStillReportedAtMostOnceAMinute(t *testing.T) {
	ctx := context.Background()
	disk, fill, _ := smallDisk(t)
	idx, err := bleveindex.Open(filepath.Join(disk, "placeindex"))
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	var mu sync.Mutex
	var failures, lines int
	idx.ReportWriteFailures(func(err error, notReported int) {
		mu.Lock()
		defer mu.Unlock()
		lines++
		if err != nil {
			failures++
		}
	})
	for i := range 5 {
		if err := idx.Upsert(ctx, cafes(i*200, i*200+200), nil, fmt.Sprint("a", i)); err != nil {
			t.Fatal(err)
		}
	}
	fill()
	filler := filepath.Join(disk, "filler")
	fi, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, fi.Size()-160<<10); err != nil { // 160 KiB free
		t.Fatal(err)
	}
	for i := range 60 {
		_ = idx.Upsert(ctx, cafes(2000+i*3, 2000+i*3+3), nil, fmt.Sprint("b", i))
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d lines, %d of them failures", lines, failures)
	if failures != 1 || lines > 2 {
		t.Fatalf("in a few seconds of failed merges between persisted batches: %d lines, %d of them failures; want one failure (and at most the write after it)", lines, failures)
	}
}
