package migrations_test

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/migrations"
	"github.com/kyapi/kyapi/projections"
)

// The first store's GrantBonus (903070f, commands/accounts.go) read its clock (granted_at)
// BEFORE its transaction, then credited every account whose key was usable when its SELECT ran:
//
//	now := h.now()
//	... INSERT INTO bonus_grants (..., granted_at) VALUES (..., now)
//	SELECT DISTINCT account_id FROM api_keys WHERE state = 'active' OR (state = 'grace' AND grace_until > $1)
//
// and IssueKey wrote issued_at = its own clock. A key issued between the grant's clock reading
// and its SELECT (or by a process whose clock runs ahead) is committed, active, and credited,
// with issued_at later than granted_at. That is the same rule today's GrantBonus keeps (a key
// committed before the grant reads api_keys is eligible: it pushes granted_at to
// max(issued_at)), only without the pushed granted_at. The upgraded store must audit clean.
func TestAFirstStoreBonusToAKeyIssuedWhileTheGrantRanAuditsClean(t *testing.T) {
	ctx := context.Background()
	pool := databaseThrough(t, "0004_catalog.sql")
	hash := domain.HashKey("svc_live_firststorebonusrace")
	h := hex.EncodeToString(hash[:])
	// Grant's clock: 12:00:00.000; key issued (committed before the grant's SELECT) at 12:00:00.300.
	legacy := `
		INSERT INTO accounts (account_id, name, email, balance, version, opened_at)
			VALUES ('acc_1', 'Old Co', 'old@test.example', 50, 3, '2026-11-21T10:00:00Z');
		INSERT INTO api_keys (key_id, key_hash, account_id, last4, state, issued_at)
			VALUES ('key_1', '\x` + h + `', 'acc_1', 'race', 'active', '2026-11-21T12:00:00.3Z');
		INSERT INTO bonus_grants (outage_id, credits, reason, accounts, granted_at)
			VALUES ('outage-1', 50, 'outage', 1, '2026-11-21T12:00:00Z');
		INSERT INTO events (stream_id, version, type, payload, metadata, recorded_at) VALUES
			('account-acc_1', 1, 'AccountOpened', '{"account_id":"acc_1","name":"Old Co","email":"old@test.example","credits_delta":0,"balance_after":0}', '{"actor":"admin"}', '2026-11-21T10:00:00Z'),
			('account-acc_1', 2, 'KeyIssued', '{"account_id":"acc_1","key_id":"key_1","key_hash":"` + h + `","last4":"race","credits_delta":0,"balance_after":0}', '{"actor":"admin"}', '2026-11-21T12:00:00.3Z'),
			('account-acc_1', 3, 'BonusGranted', '{"account_id":"acc_1","outage_id":"outage-1","credits":50,"reason":"outage","credits_delta":50,"balance_after":50}', '{"actor":"admin"}', '2026-11-21T12:00:00Z');`
	if _, err := pool.Exec(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, a := range projections.SQLAppliers(time.Now) {
		if _, err := projections.CatchUp(ctx, pool, projections.SQL{Pool: pool, Applier: a}, 100, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []audit.Options{{}, {AccountID: "acc_1"}} {
		var out strings.Builder
		o.Out = &out
		if rep, err := audit.Run(ctx, pool, o); err != nil || len(rep.Differences) != 0 {
			t.Errorf("audit %q of an upgraded first store whose grant credited a key issued while it ran: %v\n%s", o.AccountID, err, out.String())
		}
	}
}
