package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// A DATA_DIR keeps the place index of the database it was served from. README's `make run`
// serves with ./data whatever DATABASE_URL names, so a serve on another database finds an
// index whose checkpoint (a transaction id and position) belongs to the first: taken for its
// own, every event of the second database below it is skipped, and the place list and geo
// search answer 200 with none of its places (and with the other's). The index records the
// identity of the event store it was built from; a serve on another store rebuilds it from
// position 0, saying why in its log (docs/operations.md, "Processes and configuration").
func TestAPlaceIndexBuiltFromAnotherDatabaseIsRebuiltFromThisOne(t *testing.T) {
	dataDir, dir := t.TempDir(), t.TempDir()
	// Database B is filled first (lower transaction ids), database A after.
	dbB := pgtest.NewDatabase(t)
	importPlaces(t, dbB, dir, "b.ndjson", `{"record":"place","place_id":"plc_in_b","name":"Berea Books","category":"shopping.books","town_slug":"berea","latitude":37.57,"longitude":-84.29}`+"\n")
	dbA := pgtest.NewDatabase(t)
	importPlaces(t, dbA, dir, "a.ndjson", `{"record":"place","place_id":"plc_in_a","name":"Ashland Diner","category":"food.diner","town_slug":"ashland","latitude":37.58,"longitude":-84.30}`+"\n")
	// The first `make run`: serve on A with DATA_DIR.
	readA := freeAddr(t)
	a := startKyapi(t, map[string]string{"DATABASE_URL": dbA, "DATA_DIR": dataDir, "READ_ADDR": readA, "ADMIN_ADDR": freeAddr(t)}, "serve")
	waitServing(t, a, readA)
	stopServing(t, a)
	// The second: the same DATA_DIR, database B.
	readB, adminB := freeAddr(t), freeAddr(t)
	b := startKyapi(t, map[string]string{"DATABASE_URL": dbB, "DATA_DIR": dataDir, "READ_ADDR": readB, "ADMIN_ADDR": adminB, "ADMIN_TOKEN": "tok"}, "serve")
	waitServing(t, b, readB)
	if out := b.output(); !strings.Contains(out, "another event store") {
		t.Errorf("serve on B rebuilt nothing, or said nothing of why:\n%s", out)
	}
	key := customerKey(t, adminB)
	for _, path := range []string{"/api/data/places?limit=10", "/api/data/search?lat=37.57&lng=-84.29&radius=5"} {
		status, body := getData(t, readB, key, path)
		if status != http.StatusOK || !strings.Contains(string(body), "plc_in_b") || strings.Contains(string(body), "plc_in_a") {
			t.Errorf("GET %s on database B (its catalog holds plc_in_b only), with a DATA_DIR built from database A: %d %s",
				path, status, body)
		}
	}
	if t.Failed() {
		t.Logf("serve on B:\n%s", b.output())
	}
}

// waitServing waits for p's read API on addr; it fails the test if p ends first.
func waitServing(t *testing.T, p *kyapiProc, addr string) {
	t.Helper()
	for end := time.Now().Add(2 * time.Minute); !healthy(addr); time.Sleep(100 * time.Millisecond) {
		if p.ended() || time.Now().After(end) {
			out, code, _ := p.wait(time.Second)
			t.Fatalf("serve did not become healthy on %s (exit %d)\n%s", addr, code, out)
		}
	}
}

// adminCall POSTs body to the admin API at addr and returns the data of its 201 answer.
func adminCall(t *testing.T, addr, token, path, body string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %d %s, want 201", path, resp.StatusCode, b)
	}
	var env struct {
		Data map[string]any `json:"data"`
	}
	_ = json.Unmarshal(b, &env)
	return env.Data
}

// importPlaces writes ndjson to a file named name under dir and imports it into the database at
// dbURL with `kyapi import`.
func importPlaces(t *testing.T, dbURL, dir, name, ndjson string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(ndjson), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": dbURL}, 2*time.Minute, "import", p); code != 0 {
		t.Fatalf("import %s: exit %d\n%s", name, code, out)
	}
}

// stopServing stops p with SIGTERM and fails the test unless it exits 0.
func stopServing(t *testing.T, p *kyapiProc) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if out, code, _ := p.wait(time.Minute); code != 0 {
		t.Fatalf("serve: exit %d\n%s", code, out)
	}
}

// customerKey opens an account with 1,000 credits through the admin API at admin (token tok)
// and returns its new API key.
func customerKey(t *testing.T, admin string) string {
	t.Helper()
	acc := adminCall(t, admin, "tok", "/admin/accounts", `{"name":"Acme","email":"ops@acme.example"}`)["account_id"].(string)
	adminCall(t, admin, "tok", "/admin/accounts/"+acc+"/purchases", `{"amount_cents":500,"payment_ref":"p1"}`)
	return adminCall(t, admin, "tok", "/admin/accounts/"+acc+"/keys", ``)["api_key"].(string)
}

// getData GETs path from the read API at addr with key: the status and the body.
func getData(t *testing.T, addr, key, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}
