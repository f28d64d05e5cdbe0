package migrations_test

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/migrations"
	"github.com/kyapi/kyapi/projections"
)

// The first store read its clock before the account lock, so two charges racing across
// midnight could be written day D first and day D-1 second. Carried over, the second takes the
// first's time (time never goes back within a stream) and so falls on day D; the claims of day
// D start at the first. The resource the second paid on D-1 must still cost on D: its payload
// says the day it was paid for.
func TestAFirstStoreChargeWrittenAfterMidnightForTheDayBeforeClaimsNothingToday(t *testing.T) {
	ctx := context.Background()
	pool := databaseThrough(t, "0004_catalog.sql")
	const apiKey = "svc_live_firststoremidnight"
	hash := domain.HashKey(apiKey)
	legacy := `
		INSERT INTO accounts (account_id, name, email, balance, version, opened_at)
			VALUES ('acc_1', 'Old Co', 'old@test.example', 998, 5, '2026-11-20T10:00:00Z');
		INSERT INTO api_keys (key_id, key_hash, account_id, last4, state, issued_at)
			VALUES ('key_1', '\x` + hex.EncodeToString(hash[:]) + `', 'acc_1', 'ight', 'active', '2026-11-20T10:00:01Z');
		INSERT INTO events (stream_id, version, type, payload, metadata, recorded_at) VALUES
			('account-acc_1', 1, 'AccountOpened', '{"account_id":"acc_1","name":"Old Co","email":"old@test.example","credits_delta":0,"balance_after":0}', '{"actor":"admin"}', '2026-11-20T10:00:00Z'),
			('account-acc_1', 2, 'KeyIssued', '{"account_id":"acc_1","key_id":"key_1","key_hash":"` + hex.EncodeToString(hash[:]) + `","last4":"ight","credits_delta":0,"balance_after":0}', '{"actor":"admin"}', '2026-11-20T10:00:01Z'),
			('account-acc_1', 3, 'CreditsPurchased', '{"account_id":"acc_1","payment_ref":"p","amount_cents":500,"credits":1000,"credits_delta":1000,"balance_after":1000}', '{}', '2026-11-20T10:00:02Z'),
			('account-acc_1', 4, 'RequestCharged', '{"account_id":"acc_1","key_id":"key_1","request_id":"r1","operation":"places.detail","day":"2026-11-21","paid":["place:plc_today"],"credits_delta":-1,"balance_after":999}', '{"request_id":"r1","actor":"key:key_1"}', '2026-11-21T00:00:00.1Z'),
			('account-acc_1', 5, 'RequestCharged', '{"account_id":"acc_1","key_id":"key_1","request_id":"r2","operation":"places.detail","day":"2026-11-20","paid":["place:plc_yesterday"],"credits_delta":-1,"balance_after":998}', '{"request_id":"r2","actor":"key:key_1"}', '2026-11-20T23:59:59.9Z');
		INSERT INTO purchases (payment_ref, account_id, amount_cents, credits_added, balance_after, recorded_at)
			VALUES ('p', 'acc_1', 500, 1000, 1000, '2026-11-20T10:00:02Z');`
	if _, err := pool.Exec(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	noonD := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	meter := commands.NewMeter(eventstore.New(pool), func() time.Time { return noonD }, commands.MeterOptions{})
	defer meter.Close()
	caller, err := meter.Authenticate(ctx, hash)
	if err != nil {
		t.Fatal(err)
	}
	for place, credits := range map[string]int64{"plc_today": 0, "plc_yesterday": 1} {
		res, err := meter.Charge(ctx, commands.ChargeRequest{Caller: caller, Operation: domain.OpPlaceDetail,
			Resources: []string{domain.PlaceResource(place)}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Credits != credits {
			t.Errorf("%s on 2026-11-21: %d credits, want %d (paid %s)", place, res.Credits, credits,
				map[int64]string{0: "that day already", 1: "on 2026-11-20 only"}[credits])
		}
	}
	// The audit agrees: the day-D charge of plc_yesterday is its first payment that day.
	for _, a := range projections.SQLAppliers(time.Now) {
		if _, err := projections.CatchUp(ctx, pool, projections.SQL{Pool: pool, Applier: a}, 100, nil); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if rep, err := audit.Run(ctx, pool, audit.Options{Out: &out}); err != nil || len(rep.Differences) != 0 {
		t.Fatalf("audit: %+v, %v\n%s", rep, err, out.String())
	}
}
