package audit_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/internal/disktest"
)

// A signing key that cannot be written whole (its disk full) leaves no file behind: a key file
// is never overwritten, so a partial one would refuse every later -new-key under its name and
// be refused by LoadSigningKey, with no public key printed for it. Once space is freed, the
// same command makes the key.
func TestASigningKeyThatCannotBeWrittenWholeLeavesNoFile(t *testing.T) {
	dir, fill, free := disktest.Small(t, 1)
	path := filepath.Join(dir, "digest.key")
	fill()
	_, err := audit.NewSigningKey(path)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("NewSigningKey on a full disk: %v, want ENOSPC", err)
	}
	if _, serr := os.Lstat(path); !errors.Is(serr, os.ErrNotExist) {
		b, _ := os.ReadFile(path)
		t.Fatalf("a key that could not be written left a file of %d bytes at %s (stat: %v)", len(b), path, serr)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "filler" {
			t.Fatalf("a key that could not be written left %s behind", e.Name())
		}
	}
	free()
	pub, err := audit.NewSigningKey(path)
	if err != nil {
		t.Fatalf("once space is freed: %v", err)
	}
	key, err := audit.LoadSigningKey(path)
	if err != nil || !pub.Equal(key.Public()) {
		t.Fatalf("the key made once space is freed does not load as the key printed: %v", err)
	}
}
