package app

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
)

// The embedded index of a DATA_DIR that another process holds (bolt's file lock; a second
// open in this process takes the lock the same way) is refused after a while (indexLockTimeout),
// with an error naming DATA_DIR, rather than waited for without end.
func TestOpenIndexRefusesADataDirInUse(t *testing.T) {
	dataDir := t.TempDir()
	held, err := bleveindex.Open(filepath.Join(dataDir, "placeindex"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	defer func(d time.Duration) { indexLockTimeout = d }(indexLockTimeout)
	indexLockTimeout = 200 * time.Millisecond

	done := make(chan error, 1)
	go func() {
		x, err := OpenIndex(context.Background(), Config{DataDir: dataDir})
		if err == nil {
			x.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "DATA_DIR "+dataDir) || !strings.Contains(err.Error(), "another kyapi process") {
			t.Fatalf("OpenIndex on a DATA_DIR in use: %v; want an error naming DATA_DIR and another process", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("OpenIndex on a DATA_DIR in use still waits after 30 s")
	}
	// The index was not harmed: it still answers, and opens once let go.
	if _, err := held.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	held.Close()
	x, err := OpenIndex(context.Background(), Config{DataDir: dataDir})
	if err != nil {
		t.Fatalf("OpenIndex once the other holder closed: %v", err)
	}
	x.Close()
}

// While OpenIndex waits for the lock, the end of its context (SIGTERM, in kyapi) ends the
// wait at once, and nothing goes on waiting behind it: a wait left running would open the
// index (creating files in DATA_DIR) the moment the other holder lets go.
func TestOpenIndexStopsWaitingWhenItsContextEnds(t *testing.T) {
	dataDir := t.TempDir()
	held, err := bleveindex.Open(filepath.Join(dataDir, "placeindex"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	defer func(d time.Duration) { indexLockTimeout = d }(indexLockTimeout)
	indexLockTimeout = time.Minute

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		x, err := OpenIndex(ctx, Config{DataDir: dataDir})
		if err == nil {
			x.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("OpenIndex with its context ended while it waits: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("OpenIndex still waits 20 s after its context ended")
	}
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "bleveindex.OpenWaiting") {
		t.Fatalf("OpenIndex returned but a goroutine still waits to open the index:\n%s", stacks)
	}
}
