package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
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

// A read model that cannot apply an event (here a charge whose payload no decoder reads,
// written past the commands) stops there. `kyapi audit` used to stop with it, printing the
// projection's error and no difference; it audits the store anyway, names the event, and
// counts the stop as a difference (docs/operations.md, "`kyapi audit`").
func TestAuditNamesAnEventTheReadModelsCannotApplyAndAuditsTheRest(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := eventstore.New(pool)
	acc := commands.Accounts{Store: store, Clock: time.Now}
	meta := eventstore.Metadata{Actor: "test"}
	id, err := acc.OpenAccount(ctx, "Audit", "audit@example.com", meta)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acc.Purchase(ctx, id, 500, "audit-1", meta); err != nil {
		t.Fatal(err)
	}
	stream := domain.AccountStream(id)
	err = store.WithTx(ctx, func(tx pgx.Tx) error {
		heads, err := eventstore.OpenHeads(ctx, tx, true, stream)
		if err != nil {
			return err
		}
		_, err = eventstore.Append(ctx, tx, heads[stream], time.Now(),
			eventstore.NewEvent{Type: domain.EventRequestCharged, Payload: json.RawMessage(`{"k":"not a number"}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": dbURL}, 60*time.Second, "audit")
	if code != 1 {
		t.Errorf("audit of a store holding an event no read model can apply: exit %d, want 1", code)
	}
	for _, want := range []string{
		"DIFF stream " + stream + " v3 (position ",         // the audit's fold names the event
		"payload cannot be read",                           //
		"DIFF a read model could not be brought up to the", // and the read models' stop
		"audited 1 accounts",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("audit output lacks %q:\n%s", want, out)
		}
	}
}
