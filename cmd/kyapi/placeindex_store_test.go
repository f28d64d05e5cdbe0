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
	dataDir := t.TempDir()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Database B is filled first (lower transaction ids), database A after.
	dbB := pgtest.NewDatabase(t)
	if out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": dbB}, 2*time.Minute, "import",
		write("b.ndjson", `{"record":"place","place_id":"plc_in_b","name":"Berea Books","category":"shopping.books","town_slug":"berea","latitude":37.57,"longitude":-84.29}`+"\n")); code != 0 {
		t.Fatalf("import into B: exit %d\n%s", code, out)
	}
	dbA := pgtest.NewDatabase(t)
	if out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": dbA}, 2*time.Minute, "import",
		write("a.ndjson", `{"record":"place","place_id":"plc_in_a","name":"Ashland Diner","category":"food.diner","town_slug":"ashland","latitude":37.58,"longitude":-84.30}`+"\n")); code != 0 {
		t.Fatalf("import into A: exit %d\n%s", code, out)
	}
	// The first `make run`: serve on A with DATA_DIR.
	readA := freeAddr(t)
	a := startKyapi(t, map[string]string{"DATABASE_URL": dbA, "DATA_DIR": dataDir, "READ_ADDR": readA, "ADMIN_ADDR": freeAddr(t)}, "serve")
	waitServing(t, a, readA)
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	if out, code, _ := a.wait(time.Minute); code != 0 {
		t.Fatalf("serve on A: exit %d\n%s", code, out)
	}
	// The second: the same DATA_DIR, database B.
	readB, adminB := freeAddr(t), freeAddr(t)
	b := startKyapi(t, map[string]string{"DATABASE_URL": dbB, "DATA_DIR": dataDir, "READ_ADDR": readB, "ADMIN_ADDR": adminB, "ADMIN_TOKEN": "tok"}, "serve")
	waitServing(t, b, readB)
	if out := b.output(); !strings.Contains(out, "another event store") {
		t.Errorf("serve on B rebuilt nothing, or said nothing of why:\n%s", out)
	}
	acc := adminCall(t, adminB, "tok", "/admin/accounts", `{"name":"Acme","email":"ops@acme.example"}`)["account_id"].(string)
	adminCall(t, adminB, "tok", "/admin/accounts/"+acc+"/purchases", `{"amount_cents":500,"payment_ref":"p1"}`)
	key := adminCall(t, adminB, "tok", "/admin/accounts/"+acc+"/keys", ``)["api_key"].(string)
	for _, path := range []string{"/api/data/places?limit=10", "/api/data/search?lat=37.57&lng=-84.29&radius=5"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+readB+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "plc_in_b") || strings.Contains(string(body), "plc_in_a") {
			t.Errorf("GET %s on database B (its catalog holds plc_in_b only), with a DATA_DIR built from database A: %d %s",
				path, resp.StatusCode, body)
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
