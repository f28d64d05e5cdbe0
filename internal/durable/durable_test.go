package durable_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kyapi/kyapi/internal/durable"
)

// WriteFile replaces a file whole, with its mode, and leaves nothing beside it; a write that
// cannot be done leaves the file as it was.
func TestWriteFileReplacesAFileWholeOrNotAtAll(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "digest.json")
	for _, content := range []string{"first\n", "second, longer\n"} {
		if err := durable.WriteFile(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
			t.Fatalf("mode %v, want 0640", st.Mode().Perm())
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d entries in the directory, want the file alone", len(entries))
	}
	// A directory where the file should be: the rename fails, the directory is untouched and
	// no temporary file is left.
	blocked := filepath.Join(dir, "blocked")
	if err := os.Mkdir(blocked, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(blocked, "inside"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := durable.WriteFile(blocked, []byte("new"), 0o644); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("%d entries after the failed write, want 2 (no temporary file left)", len(entries))
	}
	if err := durable.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
}
