package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// `kyapi digest -o FILE` replaces FILE whole; the signing key it signs with is never replaced
// (docs/operations.md, "Keys"): `-o` naming the key file, under its own name or another (a
// link), is refused before anything is taken, and the key is left as it was. Written over, the
// key would be lost for good, and with it every later digest signed by the public key auditors
// were given.
func TestADigestIsNeverWrittenOverItsSigningKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "digest.key")
	if _, err := audit.NewSigningKey(keyFile); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.key")
	if err := os.Symlink(keyFile, link); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "AUDIT_SIGNING_KEY": keyFile}
	for _, out := range []string{keyFile, link, filepath.Join(dir, ".", "digest.key")} {
		got, code, _ := runKyapi(t, vars, 60*time.Second, "digest", "-o", out)
		if code == 0 || !strings.Contains(got, "signing key") {
			t.Errorf("kyapi digest -o %s (the signing key): exit %d; want it refused, naming the signing key\n%s", out, code, got)
		}
		if now, err := os.ReadFile(keyFile); err != nil || !bytes.Equal(now, key) {
			t.Fatalf("kyapi digest -o %s wrote over the signing key (%v):\n%s", out, err, now)
		}
	}
	// Elsewhere it is written as before.
	out := filepath.Join(dir, "digest.json")
	if got, code, _ := runKyapi(t, vars, 60*time.Second, "digest", "-o", out); code != 0 {
		t.Fatalf("kyapi digest -o %s: exit %d\n%s", out, code, got)
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
}
