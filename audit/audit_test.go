package audit_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

func TestAuditFindsNothingOnAConsistentDatabaseAndEveryAlteredReadModelRow(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	store := eventstore.New(pool)
	now := func() time.Time { return time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) }
	acc := commands.Accounts{Store: store, Clock: now}
	ch := commands.Charger{Store: store, Clock: now}
	id, err := acc.OpenAccount(ctx, "Audit Co", "audit@test.example", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := acc.IssueKey(ctx, id, eventstore.Metadata{})
	if _, err := acc.Purchase(ctx, id, 500, "p1", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		if _, err := ch.Charge(ctx, commands.ChargeRequest{KeyHash: domain.HashKey(key.APIKey), Operation: domain.OpPlaceDetail,
			Resources: []string{domain.PlaceResource(fmt.Sprint("p", i%11))}}); err != nil {
			t.Fatal(err)
		}
	}
	catchUp := func() {
		for _, a := range projections.SQLAppliers("https://api.test") {
			p := projections.SQL{Pool: pool, Applier: a}
			for deadline := time.Now().Add(time.Minute); ; {
				if _, err := projections.CatchUp(ctx, pool, p, 1000, nil); err != nil {
					t.Fatal(err)
				}
				cp, _ := p.Checkpoint(ctx)
				head, _ := eventstore.Head(ctx, pool)
				if !cp.Less(head) || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond) // another transaction on the cluster holds back xmin
			}
		}
	}
	catchUp()
	rep, err := audit.Run(ctx, pool, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 || rep.Accounts != 1 || rep.Events != 33 {
		t.Fatalf("consistent database: %+v", rep)
	}

	alterations := []struct{ name, sql, want string }{
		{"balance", `UPDATE rm_balances SET balance = balance + 1`, "balances read model"},
		{"ledger delta", `UPDATE rm_ledger SET credits_delta = -2 WHERE version = 5`, "ledger read model"},
		{"ledger row deleted", `DELETE FROM rm_ledger WHERE version = 7`, "missing from the ledger"},
	}
	for _, a := range alterations {
		t.Run(a.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, a.sql); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			// Audit inside a transaction we roll back, so each alteration is seen alone.
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			rep, err := audit.Run(ctx, pool, &out)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Differences) == 0 || !strings.Contains(out.String(), a.want) {
				t.Fatalf("altered %s: differences %v", a.name, rep.Differences)
			}
			// Put the read models back as a rebuild would.
			for _, ap := range projections.SQLAppliers("https://api.test") {
				p := projections.SQL{Pool: pool, Applier: ap}
				if err := p.Reset(ctx); err != nil {
					t.Fatal(err)
				}
			}
			catchUp()
			if rep, _ := audit.Run(ctx, pool, io.Discard); len(rep.Differences) != 0 {
				t.Fatalf("after rebuild: %v", rep.Differences)
			}
		})
	}
}
