package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/migrations"
)

// docs/operations.md, "What protects the history": serve with a role that does not own the tables, with
// only SELECT and INSERT on events. Such a role has no CREATE on the schema: every command
// applies the migrations on connecting, and that must not need it once nothing is pending; nor
// may the partitions the events table needs ahead of its appends. The grants are made as the
// docs say, on a store of an earlier version (through migration 0031), which the owner then
// migrates: what later migrations add must not lock the serving role out.
func TestServeRunsAsARoleThatDoesNotOwnTheTables(t *testing.T) {
	ctx := context.Background()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	role := "kyapi_app_" + hex.EncodeToString(b)
	server, err := pgxpool.New(ctx, pgtest.ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if _, err := server.Exec(ctx, `CREATE ROLE `+role+` LOGIN PASSWORD 'pw'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // runs after the database is dropped (cleanups run last registered first)
		if a, err := pgxpool.New(context.Background(), pgtest.ServerURL(t)); err == nil {
			_, _ = a.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
			a.Close()
		}
	})
	dbURL := pgtest.NewDatabase(t)
	owner, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	// The store as the version of migration 0031 left it, the role granted what the docs say.
	if _, err := owner.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.ApplyThrough(ctx, owner, "0031_partitions_made_by_the_owner.sql"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`GRANT USAGE ON SCHEMA public TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ` + role,
		`REVOKE UPDATE, DELETE ON events FROM ` + role,
		`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO ` + role,
		`GRANT EXECUTE ON FUNCTION kyapi_ensure_event_partitions(integer) TO ` + role,
	} {
		if _, err := owner.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := migrations.Apply(ctx, owner); err != nil { // kyapi migrate, as the owner
		t.Fatal(err)
	}
	u, _ := url.Parse(dbURL)
	u.User = url.UserPassword(role, "pw")
	roleURL := u.String()

	// The partitions ahead of the appends are created for the role, owned by the tables' owner,
	// at most 10 partition sizes ahead.
	app, err := pgxpool.New(ctx, roleURL)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	var created int
	if err := app.QueryRow(ctx, `SELECT kyapi_ensure_event_partitions(4)`).Scan(&created); err != nil || created == 0 {
		t.Fatalf("partitions ahead, as a role that does not own the tables: %d created, %v", created, err)
	}
	if _, err := app.Exec(ctx, `SELECT kyapi_ensure_event_partitions(200)`); err == nil {
		t.Fatal("200 partition sizes ahead were made: the owner's function makes at most 10")
	}
	// A role granted nothing may not have the owner make partitions.
	stranger := role + "_x"
	if _, err := server.Exec(ctx, `CREATE ROLE `+stranger+` LOGIN PASSWORD 'pw'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if a, err := pgxpool.New(context.Background(), pgtest.ServerURL(t)); err == nil {
			_, _ = a.Exec(context.Background(), `DROP ROLE IF EXISTS `+stranger)
			a.Close()
		}
	})
	if _, err := owner.Exec(ctx, `GRANT USAGE ON SCHEMA public TO `+stranger); err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(stranger, "pw")
	other, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, strangerErr := other.Exec(ctx, `SELECT kyapi_ensure_event_partitions(2)`)
	other.Close()
	if _, err := owner.Exec(ctx, `REVOKE ALL ON SCHEMA public FROM `+stranger); err != nil { // so that the role can be dropped
		t.Fatal(err)
	}
	if strangerErr == nil {
		t.Fatal("a role granted nothing had the owner's function make partitions")
	}

	read, admin := freeAddr(t), freeAddr(t)
	p := startKyapi(t, map[string]string{"DATABASE_URL": roleURL, "READ_ADDR": read, "ADMIN_ADDR": admin, "ADMIN_TOKEN": "tok"}, "serve")
	for !healthy(read) {
		if p.ended() {
			out, code, _ := p.wait(time.Second)
			t.Fatalf("kyapi serve as a role that does not own the tables: exit %d\n%s", code, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	call := func(method, addr, path, auth, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out struct{ Data any }
		if resp.StatusCode >= 300 || json.Unmarshal(raw, &out) != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
		m, _ := out.Data.(map[string]any)
		return m
	}
	account := call("POST", admin, "/admin/accounts", "tok", `{"name":"App Role","email":"app@example.com"}`)["account_id"].(string)
	key := call("POST", admin, "/admin/accounts/"+account+"/keys", "tok", "")["api_key"].(string)
	call("POST", admin, "/admin/accounts/"+account+"/purchases", "tok", `{"amount_cents":500,"payment_ref":"least-privilege"}`)
	call("GET", read, "/api/data/towns", key, "") // a metered request: a charge appended
	if got := call("GET", admin, "/admin/accounts/"+account, "tok", "")["balance"]; got == float64(1000) {
		t.Fatalf("balance %v after a paid request: nothing was charged", got)
	}
}
