package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// Go's flag package stops at the first word that is not a flag, and what follows is left
// to the command: a command that takes only flags must refuse such a word (a usage error,
// exit status 2, naming it) rather than run without the flags after it. `kyapi migrate
// --dry-run` must not apply migrations, `kyapi audit extra -account X` must not audit
// everything.
func TestEveryCommandRefusesAStrayArgument(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	digestFile := filepath.Join(t.TempDir(), "d.json")
	for _, args := range [][]string{
		{"migrate", "--dry-run"},
		{"migrate", "extra"},
		{"audit", "extra"},
		{"audit", "extra", "-account", "acc_nope"},
		{"rebuild", "extra"},
		{"rebuild", "-batch", "100", "extra"},
		{"demo-data", "-places", "3", "extra"},
		{"digest", "-o", digestFile, "extra"},
		{"archive", "-list", "extra"},
	} {
		t.Run(strings.ReplaceAll(strings.Join(args, " "), digestFile, "FILE"), func(t *testing.T) {
			out, code, ended := runKyapi(t, map[string]string{"DATABASE_URL": dbURL}, 60*time.Second, args...)
			if !ended {
				t.Fatalf("kyapi %s did not end\n%s", strings.Join(args, " "), out)
			}
			stray := strings.TrimLeft(args[len(args)-1], "-") // the flag package names -dry-run
			if args[1] == "extra" {
				stray = "extra"
			}
			if code != 2 || !strings.Contains(out, stray) {
				t.Fatalf("kyapi %s: exit %d; want a usage error (exit 2) naming %s\n%s", strings.Join(args, " "), code, stray, out)
			}
		})
	}
}

// `kyapi audit -public-key HEX` without -digest has no signature to check: it says so (a usage
// error) rather than audit without the check the operator asked for.
func TestAuditRefusesAPublicKeyWithoutADigest(t *testing.T) {
	out, code, ended := runKyapi(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t)}, 60*time.Second,
		"audit", "-public-key", strings.Repeat("ab", 32))
	if !ended || code != 2 || !strings.Contains(out, "-digest") {
		t.Fatalf("kyapi audit -public-key HEX: exit %d; want a usage error (exit 2) asking for -digest\n%s", code, out)
	}
}

// A command's alternative forms are not mixed: `kyapi digest -new-key K -o F` made the key and
// dropped -o without a word (no digest written, exit 0), and `kyapi archive -list -before N -o F`
// listed and archived nothing. Each is a usage error, and nothing is done.
func TestAlternativeFormsOfACommandAreNotMixed(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k.pem")
	dbURL := pgtest.NewDatabase(t)
	for _, args := range [][]string{
		{"digest", "-new-key", key, "-o", filepath.Join(dir, "digest.json")},
		{"archive", "-list", "-before", "10"},
		{"archive", "-list", "-o", filepath.Join(dir, "a.archive")},
	} {
		out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": dbURL}, 60*time.Second, args...)
		if code != 2 || !strings.Contains(out, "not both") {
			t.Errorf("kyapi %s: exit %d; want a usage error (exit 2) saying the forms are not mixed\n%s", strings.Join(args, " "), code, out)
		}
	}
	if _, err := os.Stat(key); err == nil {
		t.Errorf("kyapi digest -new-key K -o F made the key %s though it was refused", key)
	}
}

// `kyapi serve extra -read=false -admin=false` must not serve the APIs the operator turned off.
func TestServeRefusesAStrayArgumentBeforeItsFlags(t *testing.T) {
	serveRefuses(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t)}, []string{"extra", "-read=false", "-admin=false"}, `"extra"`)
}

// `kyapi serve -read=false -admin=false -projections=false` has nothing to run: it says so
// rather than sit there serving nothing.
func TestServeRefusesToServeNothing(t *testing.T) {
	serveRefuses(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t)}, []string{"-read=false", "-admin=false", "-projections=false"},
		"nothing to serve")
}

// A command that takes arguments (import's files, restore's file) keeps them, but a word
// that looks like a flag after them would not be read as one: it is refused, saying to put
// flags first. After "--" every word is a file.
func TestImportRefusesAFlagAfterItsFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.ndjson")
	if err := os.WriteFile(file, []byte(`{"record":"town","slug":"berea","name":"Berea"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.NewDatabase(t)
	for _, args := range [][]string{{"import", file, "-x"}, {"restore", file, "-h"}} {
		out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": dbURL}, 60*time.Second, args...)
		if code != 2 || !strings.Contains(out, `"`+args[2]+`"`) || !strings.Contains(out, "flags before") {
			t.Fatalf("kyapi %s: exit %d; want a usage error (exit 2) saying to put flags before the files\n%s", strings.Join(args, " "), code, out)
		}
	}
	dashed := filepath.Join(dir, "-dashed.ndjson")
	if err := os.WriteFile(dashed, []byte(`{"record":"town","slug":"corbin","name":"Corbin"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", dbURL)
	t.Chdir(dir)
	if err := runImport(context.Background(), []string{"--", "c.ndjson", "-dashed.ndjson"}); err != nil {
		t.Fatalf("kyapi import -- c.ndjson -dashed.ndjson: %v", err)
	}
}

// -h (or -help) after a command prints its usage on standard output and exits 0.
func TestACommandsHelpFlagPrintsItsUsageAndExitsZero(t *testing.T) {
	for _, args := range [][]string{{"serve", "-h"}, {"import", "-help"}, {"migrate", "-h"}, {"rebuild", "-h"}, {"restore", "-h"}} {
		cmd := exec.Command(kyapiBinary(t), args...)
		cmd.Env = kyapiEnv(t, nil)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		noRace(t, "kyapi "+strings.Join(args, " "), stderr.String())
		if err != nil || !strings.HasPrefix(string(out), "usage: kyapi "+args[0]) {
			t.Fatalf("kyapi %s: %v; standard output:\n%s\nstandard error:\n%s", strings.Join(args, " "), err, out, stderr.String())
		}
	}
}

// `kyapi demo-data -places 0` used to mean the default 20,000; a count below 1 (or more than
// one import batch holds) is a usage error, before anything is loaded.
func TestDemoDataRefusesAPlaceCountOutsideItsRange(t *testing.T) {
	for _, n := range []string{"0", "-5", "199990"} {
		out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}, 60*time.Second,
			"demo-data", "-places", n)
		if code != 2 || !strings.Contains(out, "-places must be") {
			t.Fatalf("kyapi demo-data -places %s: exit %d; want a usage error about -places\n%s", n, code, out)
		}
	}
}

// demo-data's curl line names where the read API listens (READ_ADDR), not the catalog's
// canonical URL base.
func TestTheDemoCurlLineNamesTheReadAddress(t *testing.T) {
	for addr, want := range map[string]string{
		":8080":          "http://localhost:8080",
		"0.0.0.0:18380":  "http://localhost:18380",
		"127.0.0.1:9000": "http://127.0.0.1:9000",
		"[::]:8443":      "http://localhost:8443",
		"[::1]:8080":     "http://[::1]:8080",
	} {
		if got := localURL(addr, false); got != want {
			t.Errorf("READ_ADDR %q: %q, want %q", addr, got, want)
		}
	}
	if got := localURL(":8443", true); got != "https://localhost:8443" {
		t.Errorf("with TLS: %q", got)
	}
}

// `-` is standard output for `kyapi digest -o`, but an archive cannot go there (it is synced
// before its partitions are dropped): `kyapi archive -o -` is refused as a usage mistake, never
// taken for a file named "-" in the working directory that then holds the only copy of the
// archived events while the pipe the operator meant receives nothing.
func TestArchiveRefusesStandardOutputAsItsFile(t *testing.T) {
	dir := t.TempDir()
	p := startKyapiIn(t, dir, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t)}, "archive", "-before", "10000001", "-o", "-")
	out, code, _ := p.wait(60 * time.Second)
	if code != 2 || !strings.Contains(out, "standard output") {
		t.Errorf("kyapi archive -before N -o -: exit %d; want a usage error (exit 2) saying an archive cannot go to standard output\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "-")); err == nil {
		t.Error(`kyapi archive -o - made a file named "-"`)
	}
}
