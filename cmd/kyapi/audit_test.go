package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// `kyapi audit` exits 0 on a consistent store and non-zero once the write model disagrees
// with the ledger (docs/operations.md, "`kyapi audit`").
func TestAuditExitStatusSaysWhetherTheStoreIsConsistent(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	acc := commands.Accounts{Store: eventstore.New(pool), Clock: time.Now}
	meta := eventstore.Metadata{Actor: "test"}
	id, err := acc.OpenAccount(ctx, "Audit", "audit@example.com", meta)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acc.Purchase(ctx, id, 500, "audit-1", meta); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DATABASE_URL": dbURL}
	out, code, _ := runKyapi(t, vars, 60*time.Second, "audit")
	if code != 0 || !strings.Contains(out, "0 differences") {
		t.Fatalf("audit of a consistent store: exit %d\n%s", code, out)
	}
	if _, err := pool.Exec(ctx, `UPDATE accounts SET balance = balance + 7 WHERE account_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	out, code, _ = runKyapi(t, vars, 60*time.Second, "audit")
	if code == 0 {
		t.Fatalf("audit after the write model's balance was changed behind the ledger: exit 0\n%s", out)
	}
}
