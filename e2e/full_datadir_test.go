package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/disktest"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A DATA_DIR whose disk fills up while `kyapi serve` runs: the embedded place index cannot
// persist what it is given. An import still answers 200 within its documented wait, and the
// read API serves what was imported from the index in memory — the place list with and without
// q and geo search each find the new places, and charge exactly the rows they serve; the log says
// DATA_DIR is full and what to do, a few times rather than at every try. Once space is freed
// the index is persisted, and a restart finds every place imported.
func TestAFullDataDirKeepsImportsVisibleAndIsToldToTheOperator(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	dataDir, fill, free := disktest.Small(t, 16)
	token := randomToken("admin-")
	cfg := serveConfig{Name: "A", DatabaseURL: dbURL, AdminToken: token, DataDir: dataDir}
	a := startServe(t, cfg)
	account, key := a.openAccount("Disk", 5000)

	importPlaces := func(from, to int) (int, time.Duration) {
		var buf bytes.Buffer
		for i := from; i < to; i++ {
			fmt.Fprintf(&buf, `{"record":"place","place_id":"disk-%d","name":"Diskette Diner %d","category":"food.diner","town_slug":"berea","latitude":37.5%d,"longitude":-84.29,"rating_count":%d}`+"\n", i, i, i, i)
		}
		req, _ := http.NewRequest(http.MethodPost, a.AdminURL+"/admin/catalog/import", &buf)
		req.Header.Set("Authorization", "Bearer "+token)
		start := time.Now()
		r, err := do(&http.Client{Timeout: time.Minute}, req)
		if err != nil {
			t.Fatalf("import %d-%d: %v", from, to, err)
		}
		return r.Status, time.Since(start)
	}
	if status, _ := importPlaces(0, 3); status != http.StatusOK {
		t.Fatalf("import before the disk is full: %d", status)
	}

	fill()
	status, took := importPlaces(3, 6)
	t.Logf("import while DATA_DIR is full: %d after %v", status, took)
	if status != http.StatusOK {
		t.Errorf("import while DATA_DIR is full: status %d after %v, want 200 (after at most its documented wait)", status, took)
	}

	// rows reads a list's rows; -1 for a 503 that charged nothing.
	rows := func(what string, r response) int {
		t.Helper()
		if r.Status == http.StatusServiceUnavailable && outcomeOf(r) == ", charge outcome none" {
			return -1
		}
		if r.Status != http.StatusOK {
			t.Errorf("%s: status %d %s, outcome %q", what, r.Status, r.Body, outcomeOf(r))
			return -2
		}
		var m metered
		r.decode(t, &m)
		return strings.Count(string(m.Data), `"place_id"`)
	}
	lists := []struct{ what, path string }{
		{"list with q", "/api/data/places?q=diskette&limit=50"},
		{"list", "/api/data/places?town=berea&limit=50"},
		{"geo search", "/api/data/search?lat=37.5&lng=-84.29&radius=50&limit=50"},
	}
	for _, tc := range lists {
		n := rows(tc.what, a.read(tc.path, key.APIKey))
		t.Logf("%s while DATA_DIR is full: %d places", tc.what, n)
		if n != 6 && (n != -1 || tc.what != "list with q") {
			t.Errorf("%s while DATA_DIR is full: %d places, want the 6 imported (or, for a text search, a 503 that charges nothing)", tc.what, n)
		}
	}
	if r := a.read("/api/data/places/disk-4", key.APIKey); r.Status != http.StatusOK {
		t.Errorf("detail while DATA_DIR is full: %d %s", r.Status, r.Body)
	}
	// A second import while the disk is still full: bleve takes no batch replacing documents
	// of the segment it could not write, so the index waits for space; the import answers
	// within its wait all the same.
	status, took = importPlaces(6, 9)
	t.Logf("second import while DATA_DIR is full: %d after %v", status, took)
	if status != http.StatusOK {
		t.Errorf("second import while DATA_DIR is full: status %d after %v, want 200 (after at most its documented wait)", status, took)
	}

	time.Sleep(3 * time.Second) // the index's writer keeps trying meanwhile
	out := a.Output()
	told := strings.Count(out, "cannot write DATA_DIR's place index")
	t.Logf("log lines about the full disk: %d", told)
	if told == 0 || told > 3 || !strings.Contains(out, `"data_dir":"`+dataDir) {
		t.Errorf("the log tells the operator %d times about the full disk (want a few, naming DATA_DIR):\n%s", told, tail(out, 3000))
	}

	free()
	for _, tc := range lists {
		// A guard, not a target: the projection retried while the disk was full, backing off up to 30 s.
		eventually(t, 2*time.Minute, tc.what+" once space is back", func() error {
			if n := rows(tc.what, a.read(tc.path, key.APIKey)); n != 9 {
				return fmt.Errorf("%d places", n)
			}
			return nil
		})
	}
	if out := a.Output(); !strings.Contains(out, "writing DATA_DIR's place index to disk again") {
		t.Errorf("the log does not say the index is written again:\n%s", tail(out, 3000))
	}
	requireNothingPaidTwice(t, openPool(t, dbURL), account)
	a.Stop()
	b := startServe(t, cfg)
	for _, tc := range lists {
		if n := rows(tc.what, b.read(tc.path, key.APIKey)); n != 9 {
			t.Errorf("%s after a restart once space was freed: %d places, want 9", tc.what, n)
		}
	}
	requireAuditClean(t, dbURL)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
