package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// copyDatabase copies the database at src (which nothing may be connected to) into a new one of
// the same cluster, dropped when the test ends: a backup of it, as pg_dump and pg_restore, a
// base backup or a replica would hold it.
func copyDatabase(t *testing.T, src string) string {
	t.Helper()
	u, err := url.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgxpool.New(context.Background(), pgtest.ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "kyapi_test_copy_" + hex.EncodeToString(b)
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+name+" TEMPLATE "+strings.TrimPrefix(u.Path, "/")); err != nil {
		t.Fatalf("copy database: %v", err)
	}
	t.Cleanup(func() {
		admin, err := pgxpool.New(context.Background(), pgtest.ServerURL(t))
		if err != nil {
			return
		}
		defer admin.Close()
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u.Path = "/" + name
	return u.String()
}

// A copy of a database (a backup restored, a replica promoted behind its primary) has the
// same store identity, and the place index of a DATA_DIR served from the database was taken
// as the copy's. But an index that went on past the copy holds imports the copy does not:
// its checkpoint is no position of the copy's history. Served as it was, the place list found
// a place by the name it has only in the lost import, and served (and charged) the copy's row
// under it, while its own name found nothing, for good: every later import below that
// checkpoint skipped too. Such an index is rebuilt from the database at start, saying why.
func TestAPlaceIndexAheadOfACopyOfItsDatabaseIsRebuiltFromTheCopy(t *testing.T) {
	dataDir, dir := t.TempDir(), t.TempDir()
	db := pgtest.NewDatabase(t)
	importPlaces(t, db, dir, "v1.ndjson", `{"record":"place","place_id":"plc_1","name":"Ashland Diner","category":"food.diner","town_slug":"ashland","latitude":38.47,"longitude":-82.64}`+"\n")
	backup := copyDatabase(t, db)
	importPlaces(t, db, dir, "v2.ndjson", `{"record":"place","place_id":"plc_1","name":"Zulu Tavern","category":"food.bar","town_slug":"ashland","latitude":38.47,"longitude":-82.64}`+"\n"+
		`{"record":"place","place_id":"plc_2","name":"Paris Bakery","category":"food.bakery","town_slug":"paris","latitude":38.21,"longitude":-84.25}`+"\n")
	read := freeAddr(t)
	p := startKyapi(t, map[string]string{"DATABASE_URL": db, "DATA_DIR": dataDir, "READ_ADDR": read, "ADMIN_ADDR": freeAddr(t)}, "serve")
	waitServing(t, p, read) // its index holds v2
	stopServing(t, p)

	// The database is lost; its backup, which holds v1 only, is served with the same DATA_DIR.
	read, admin := freeAddr(t), freeAddr(t)
	b := startKyapi(t, map[string]string{"DATABASE_URL": backup, "DATA_DIR": dataDir, "READ_ADDR": read, "ADMIN_ADDR": admin, "ADMIN_TOKEN": "tok"}, "serve")
	waitServing(t, b, read)
	key := customerKey(t, admin)
	for q, want := range map[string]string{"ashland": "Ashland Diner", "zulu": "", "paris": ""} {
		status, body := getData(t, read, key, "/api/data/places?q="+q)
		var env struct {
			Data []struct{ Name string }
			Meta struct {
				CreditsUsed int `json:"credits_used"`
			}
		}
		_ = json.Unmarshal(body, &env)
		var names []string
		for _, r := range env.Data {
			names = append(names, r.Name)
		}
		if got := strings.Join(names, ","); status != http.StatusOK || got != want || env.Meta.CreditsUsed != len(names) {
			t.Errorf("q=%s on the backup (plc_1 is Ashland Diner there, and plc_2 is not): %d, names %q, credits_used %d; want names %q",
				q, status, got, env.Meta.CreditsUsed, want)
		}
	}
	if out := b.output(); !strings.Contains(out, "rebuilding it") {
		t.Errorf("serve on the backup rebuilt nothing, or said nothing of why")
	}
	if t.Failed() {
		t.Logf("serve on the backup:\n%s", b.output())
	}
}
