package adminapi_test

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/adminapi"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// An admin write whose connection is lost right after its COMMIT went out was saved: it is
// answered as saved (201, with the new key, which exists nowhere else), not 503 "nothing was
// written", after which an operator would issue the key again and revoke the customer's key
// at once (a second rotation), or open the account twice. One lost before its COMMIT reached
// the server saved nothing, and its 503 says so.
func TestAnAdminWriteWhoseCommitAnswerIsLostIsAnsweredAsWhatHappened(t *testing.T) {
	cutter, url := pgtest.NewCommitCutter(t, pgtest.NewDatabase(t))
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	clk := &clock{t: t0}
	log := logrus.New()
	log.SetOutput(io.Discard)
	s := &adminapi.Server{Accounts: commands.Accounts{Store: eventstore.New(pool), Clock: clk.Now},
		Views: commands.Views{Pool: pool}, Token: adminToken, Clock: clk.Now, Log: log}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	f := &fixture{t: t, pool: pool, clock: clk, srv: srv}

	cutter.Arm(pgtest.CutAfterCommit)
	acc := f.openAccount("Lost Commit") // 201 or the test stops
	if cutter.Fired() != pgtest.CutAfterCommit {
		t.Fatal("opening the account: its COMMIT was not cut")
	}
	cutter.Arm(pgtest.CutAfterCommit)
	first := f.issueKey(acc)
	cutter.Arm(pgtest.CutAfterCommit)
	r := f.call("POST", "/admin/accounts/"+acc+"/purchases", `{"amount_cents":500,"payment_ref":"pay-1"}`)
	f.expect(r, 201, "")
	if cutter.Fired() != pgtest.CutAfterCommit {
		t.Fatal("the purchase's COMMIT was not cut")
	}
	view := f.call("GET", "/admin/accounts/"+acc, "").data()
	keys, _ := view["keys"].([]any)
	if num(view["balance"]) != 1000 || len(keys) != 1 || keys[0].(map[string]any)["key_id"] != first["key_id"] {
		t.Fatalf("after the cut writes: %v", view)
	}

	cutter.Arm(pgtest.CutBeforeCommit)
	r = f.call("POST", "/admin/accounts/"+acc+"/keys", "")
	f.expect(r, 503, "internal")
	if cutter.Fired() != pgtest.CutBeforeCommit || r.header.Get("X-Charge-Outcome") != "none" {
		t.Fatalf("a key issue whose COMMIT never reached the server: cut %d, %v %s", cutter.Fired(), r.header, r.raw)
	}
	view = f.call("GET", "/admin/accounts/"+acc, "").data()
	if keys, _ := view["keys"].([]any); len(keys) != 1 || keys[0].(map[string]any)["state"] != "active" {
		t.Fatalf("after a 503 that says nothing was written: %v", view)
	}
}
