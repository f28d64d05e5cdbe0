package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// `kyapi import FILE...` is one batch: a bad line in any file imports nothing of any file,
// and the error names the file and the line. The same files without the bad one import.
func TestKyapiImportOfSeveralFilesIsAllOrNothing(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	t.Setenv("DATABASE_URL", dbURL)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.ndjson", `{"record":"town","slug":"berea","name":"Berea"}`+"\n")
	more := write("more.ndjson", `{"record":"town","slug":"corbin","name":"Corbin"}`+"\n"+`{"record":"town","slug":"berea","name":"Berea, KY"}`+"\n")
	bad := write("bad.ndjson", `{"record":"town","slug":"hazard","name":"Hazard"}`+"\n"+`{"record":"town","slug":"london"}`+"\n")

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	townEvents := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM events e JOIN streams s USING (stream_no)
			WHERE s.stream_id LIKE 'town-%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	err = runImport(ctx, []string{good, more, bad})
	if err == nil || !strings.Contains(err.Error(), "bad.ndjson") || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("import with a bad line in the third file: %v; want an error naming bad.ndjson and line 2", err)
	}
	if n := townEvents(); n != 0 {
		t.Fatalf("the import failed but stored %d town events of the files before the bad one", n)
	}
	if err := runImport(ctx, []string{good, more}); err != nil {
		t.Fatal(err)
	}
	if n := townEvents(); n != 3 {
		t.Fatalf("%d town events after importing the good files, want 3 (berea twice, corbin)", n)
	}
	var name string
	if err := pool.QueryRow(ctx, `SELECT e.payload->>'name' FROM events e JOIN streams s USING (stream_no)
		WHERE s.stream_id = 'town-berea' ORDER BY e.version DESC LIMIT 1`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if name != "Berea, KY" {
		t.Fatalf("berea's newest import names it %q; the later file's update should win", name)
	}
}
