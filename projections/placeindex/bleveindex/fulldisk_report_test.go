package bleveindex_test

import (
	"context"
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
	waitForReports(t, &mu, &reports, 1)
	time.Sleep(2 * time.Second) // bleve retries meanwhile, none of them reported
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
	// bleve tells of the write after it has let the batch go: waited for, not raced.
	waitForReports(t, &mu, &reports, 2)
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 2 || reports[1] != nil {
		t.Fatalf("reports once a write succeeds again: %v; want the failure, then nil", reports)
	}
}

// waitForReports waits until reports holds n reports (bleve reports on goroutines of its own),
// failing the test if a minute is not enough.
func waitForReports(t *testing.T, mu *sync.Mutex, reports *[]error, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got := len(*reports)
		mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reports after a minute; want %d", got, n)
		}
	}
}
