// Package disktest gives tests a real disk that fills up: a small tmpfs mounted for the test,
// whose writes then fail with ENOSPC as a full DATA_DIR's do (docs/operations.md, "DATA_DIR's
// disk full"). Mounting needs root, which the tests run as (README, "Tests and benchmarks").
package disktest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Small mounts a tmpfs of megabytes MiB at a fresh directory, unmounted when the test ends,
// and returns it with functions that fill it to its last byte and free that space again.
func Small(t testing.TB, megabytes int) (dir string, fill, free func()) {
	t.Helper()
	dir = t.TempDir()
	size := fmt.Sprintf("size=%dm", megabytes)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("disktest: mounting a tmpfs (a real full disk; the tests run as root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("disktest: umount %s: %v: %s", dir, err, out)
		}
	})
	filler := filepath.Join(dir, "filler")
	fill = func() {
		f, err := os.OpenFile(filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, n := range []int{1 << 16, 1} { // big writes, then the last bytes
			buf := make([]byte, n)
			for {
				if _, err := f.Write(buf); err != nil {
					break
				}
			}
		}
	}
	free = func() {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	}
	return dir, fill, free
}
