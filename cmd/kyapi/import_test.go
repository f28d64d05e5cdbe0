package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// importSetup gives a test its database (DATABASE_URL is set to it), a pool on it, and a
// function that writes a file in a directory of its own.
func importSetup(t *testing.T) (string, *pgxpool.Pool, func(name, text string) string) {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	t.Setenv("DATABASE_URL", dbURL)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return dbURL, pool, write
}

func catalogEvents(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events e JOIN streams s USING (stream_no)
		WHERE s.stream_id LIKE 'town-%' OR s.stream_id LIKE 'place-%' OR s.stream_id LIKE 'event-%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A description holding the text `\u0000` (an escaped backslash, then "u0000": no NUL) is
// imported as that text; only a real NUL is refused (domain.TestANULIsRefusedButABackslashBeforeU0000IsText).
func TestImportReadsABackslashBeforeU0000AsText(t *testing.T) {
	_, pool, write := importSetup(t)
	f := write("c.ndjson", `{"record":"place","place_id":"p1","name":"Byte Cafe","category":"food.cafe","description":"C strings end with \\u0000, our coffee never does"}`+"\n")
	if err := runImport(context.Background(), []string{f}); err != nil {
		t.Fatalf("import of a line with no NUL character (the text is a backslash followed by u0000): %v", err)
	}
	var desc string
	if err := pool.QueryRow(context.Background(), `SELECT e.payload->>'description' FROM events e JOIN streams s USING (stream_no)
		WHERE s.stream_id = 'place-p1'`).Scan(&desc); err != nil {
		t.Fatal(err)
	}
	if want := `C strings end with \u0000, our coffee never does`; desc != want {
		t.Fatalf("description stored as %q, want %q", desc, want)
	}
	nul := write("nul.ndjson", `{"record":"place","place_id":"p2","name":"Nul","category":"food.cafe","description":"\u0000"}`+"\n")
	if err := runImport(context.Background(), []string{nul}); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("import of a real NUL escape: %v; want it refused", err)
	}
}

// A file saved with a UTF-8 byte order mark (Windows tools, Excel exports) imports: the mark
// is skipped (RFC 8259 §8.1 lets a parser ignore it).
func TestImportSkipsAByteOrderMarkAtTheStartOfAFile(t *testing.T) {
	_, pool, write := importSetup(t)
	f := write("bom.ndjson", "\ufeff"+`{"record":"town","slug":"berea","name":"Berea"}`+"\n")
	g := write("bom2.ndjson", "\ufeff"+`{"record":"town","slug":"corbin","name":"Corbin"}`+"\n")
	if err := runImport(context.Background(), []string{f, g}); err != nil {
		t.Fatalf("import of UTF-8 files starting with a byte order mark: %v", err)
	}
	if n := catalogEvents(t, pool); n != 2 {
		t.Fatalf("%d catalog events; want the 2 towns", n)
	}
}

// Through the binary (docs/api.md, "Catalog import"): a bad line in the middle of a file
// applies nothing and the error names the line and the field, with a non-zero exit status.
// Fixed, the same file imports every record; imported again with a change, the same id is an
// update.
func TestKyapiImportOfABadLineExitsNonZeroAndStoresNothing(t *testing.T) {
	dbURL, pool, write := importSetup(t)
	good := []string{
		`{"record":"town","slug":"berea","name":"Berea","county":"Madison","population":15539}`,
		`{"record":"place","place_id":"p1","name":"Boone Tavern","category":"food.restaurant","town_slug":"berea"}`,
		`{"record":"event","event_id":"e1","title":"Spoonbread Festival","start_date":"2026-09-18T10:00:00-04:00","town_slug":"berea","event_type":"festival"}`,
	}
	bad := `{"record":"place","place_id":"p2","name":"Bad","category":"food","rating":7}`
	text := strings.Join([]string{good[0], good[1], bad, good[2]}, "\n") + "\n"
	f := write("bad.ndjson", text)

	vars := map[string]string{"DATABASE_URL": dbURL}
	out, code, ended := runKyapi(t, vars, 60*time.Second, "import", f)
	if !ended || code == 0 {
		t.Fatalf("kyapi import of a file with a bad line: exit %d (ended %v); want non-zero\n%s", code, ended, out)
	}
	if !strings.Contains(out, "line 3") || !strings.Contains(out, `"rating"`) {
		t.Fatalf("error does not name line 3 and field rating:\n%s", out)
	}
	if n := catalogEvents(t, pool); n != 0 {
		t.Fatalf("a bad line, yet %d catalog events were stored", n)
	}
	fixed := write("fixed.ndjson", strings.Replace(text, `"rating":7`, `"rating":4.5`, 1))
	out, code, _ = runKyapi(t, vars, 60*time.Second, "import", fixed)
	if code != 0 || !strings.Contains(out, "1 towns, 2 places, 1 events (4 new, 0 updated)") {
		t.Fatalf("import of the fixed file: exit %d\n%s", code, out)
	}
	again := write("again.ndjson", `{"record":"place","place_id":"p1","name":"Boone Tavern Restaurant","category":"food.restaurant","town_slug":"berea"}`+"\n")
	out, code, _ = runKyapi(t, vars, 60*time.Second, "import", again)
	if code != 0 || !strings.Contains(out, "(0 new, 1 updated)") {
		t.Fatalf("re-import of p1: exit %d\n%s", code, out)
	}
}
