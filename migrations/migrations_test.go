package migrations_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/migrations"
	"github.com/kyapi/kyapi/projections"
)

// A database written by the first version of the store (one events table, verbose charge
// events, plain claims) is carried over: every stream chained from its first event, positions
// and checkpoints kept, totals and key numbers derived, today's claims kept as hashes — and it
// audits clean.
func TestADatabaseOfTheFirstStoreIsCarriedOverAndAuditsClean(t *testing.T) {
	ctx := context.Background()
	pool := databaseThrough(t, "0004_catalog.sql")
	legacy := `
		INSERT INTO accounts (account_id, name, email, balance, version, opened_at)
			VALUES ('acc_1', 'Old Co', 'old@test.example', 997, 5, '2026-11-20T10:00:00Z');
		INSERT INTO api_keys (key_id, key_hash, account_id, last4, state, issued_at)
			VALUES ('key_1', '\x01', 'acc_1', 'abcd', 'active', '2026-11-20T10:00:01Z');
		INSERT INTO events (stream_id, version, type, payload, metadata, recorded_at) VALUES
			('account-acc_1', 1, 'AccountOpened', '{"account_id":"acc_1","name":"Old Co","email":"old@test.example","credits_delta":0,"balance_after":0}', '{"actor":"admin"}', '2026-11-20T10:00:00Z'),
			('account-acc_1', 2, 'KeyIssued', '{"account_id":"acc_1","key_id":"key_1","key_hash":"01","last4":"abcd","credits_delta":0,"balance_after":0}', '{"actor":"admin"}', '2026-11-20T10:00:01Z'),
			('account-acc_1', 3, 'CreditsPurchased', '{"account_id":"acc_1","payment_ref":"p","amount_cents":500,"credits":1000,"credits_delta":1000,"balance_after":1000}', '{}', '2026-11-20T10:00:02Z'),
			('place-plc_1', 1, 'PlaceImported', '{"place_id":"plc_1","name":"Joe''s","category":"food"}', '{}', '2026-11-20T09:00:00Z'),
			('account-acc_1', 4, 'RequestCharged', '{"account_id":"acc_1","key_id":"key_1","request_id":"r1","operation":"places.list","day":"2026-11-20","paid":["place:plc_1","place:plc_2"],"credits_delta":-2,"balance_after":998}', '{"request_id":"r1","actor":"key:key_1"}', '2026-11-20T11:00:00Z'),
			('account-acc_1', 5, 'RequestCharged', '{"account_id":"acc_1","key_id":"key_1","request_id":"r2","operation":"places.detail","day":"2026-11-20","paid":["place:plc_3"],"credits_delta":-1,"balance_after":997}', '{"request_id":"r2","actor":"key:key_1"}', '2026-11-20T10:59:59Z');
		INSERT INTO purchases (payment_ref, account_id, amount_cents, credits_added, balance_after, recorded_at)
			VALUES ('p', 'acc_1', 500, 1000, 1000, '2026-11-20T10:00:02Z');
		INSERT INTO dedup_claims (account_id, day, resource) VALUES
			('acc_1', current_date, 'place:plc_1'), ('acc_1', current_date - 5, 'place:plc_3');
		INSERT INTO projection_checkpoints (name, transaction_id, position) VALUES ('usage', '7', 4);`
	if _, err := pool.Exec(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}

	for stream, want := range map[string]int64{"account-acc_1": 5, "place-plc_1": 1} {
		events, err := eventstore.ReadStream(ctx, pool, stream, 0)
		if err != nil || int64(len(events)) != want {
			t.Fatalf("%s: %d events, %v", stream, len(events), err)
		}
		prev := eventstore.ZeroHash
		for _, e := range events {
			if !eventstore.Verify(prev, e) {
				t.Fatalf("%s v%d does not chain", stream, e.Version)
			}
			prev = e.Hash
		}
		head, _, _ := eventstore.StreamHead(ctx, pool, stream)
		if head.Version != want || head.Hash != prev {
			t.Fatalf("%s head %+v", stream, head)
		}
	}
	// Version 5 was recorded with a time before version 4's (the first store read its clock
	// before the account lock): it is carried over at version 4's time, so time never goes
	// back within a stream.
	var v4, v5 time.Time
	if err := pool.QueryRow(ctx, `SELECT max(e.recorded_at) FILTER (WHERE e.version = 4), max(e.recorded_at) FILTER (WHERE e.version = 5)
		FROM events e JOIN streams USING (stream_no) WHERE stream_id = 'account-acc_1'`).Scan(&v4, &v5); err != nil {
		t.Fatal(err)
	}
	if !v5.Equal(v4) || !v4.Equal(time.Date(2026, 11, 20, 11, 0, 0, 0, time.UTC)) {
		t.Fatalf("carried-over times: v4 %v, v5 %v; want both 11:00:00", v4, v5)
	}
	// The account's claims start at its first charge of the day of its newest one (v4; v5 is
	// of the same day), where the meter reads them from.
	var charged, requests, keyNo, claimsFrom, v4Position int64
	var claimsDay string
	if err := pool.QueryRow(ctx, `SELECT a.charged_credits, a.requests_charged, k.key_no, a.claims_day::text, a.claims_from,
			(SELECT position FROM events WHERE stream_no = a.stream_no AND version = 4)
		FROM accounts a JOIN api_keys k USING (account_id)`).Scan(&charged, &requests, &keyNo, &claimsDay, &claimsFrom, &v4Position); err != nil {
		t.Fatal(err)
	}
	if charged != 3 || requests != 2 || keyNo != 1 || claimsDay != "2026-11-20" || claimsFrom != v4Position {
		t.Fatalf("charged %d, requests %d, key_no %d, claims from %s position %d; want 3, 2, 1, 2026-11-20 position %d",
			charged, requests, keyNo, claimsDay, claimsFrom, v4Position)
	}
	var checkpointPos int64
	_ = pool.QueryRow(ctx, `SELECT position FROM projection_checkpoints WHERE name = 'usage'`).Scan(&checkpointPos)
	if checkpointPos != 4 {
		t.Fatalf("the usage checkpoint moved to %d", checkpointPos)
	}
	for _, a := range projections.SQLAppliers(time.Now) {
		if _, err := projections.CatchUp(ctx, pool, projections.SQL{Pool: pool, Applier: a}, 100, nil); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	rep, err := audit.Run(ctx, pool, audit.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 || rep.Events != 6 {
		t.Fatalf("audit of the carried-over database: %+v\n%s", rep, out.String())
	}

	// The carried-over store is append-only and verifies clean against a digest of itself.
	if _, err := pool.Exec(ctx, `DELETE FROM events`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("DELETE on the carried-over events: %v", err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	d, err := audit.TakeDigest(ctx, pool, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d.Streams != 2 || d.Events != 6 {
		t.Fatalf("digest of the carried-over store: %d streams, %d events", d.Streams, d.Events)
	}
	if drep, err := audit.VerifyDigest(ctx, pool, d, 1); err != nil || len(drep.Differences) != 0 || drep.Events != 6 {
		t.Fatalf("verify against its digest: %+v, %v", drep, err)
	}
}

// A fresh database gets every migration, the append-only triggers included, and audits and
// verifies clean.
func TestAFreshDatabaseIsAppendOnlyAndAuditsClean(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var triggers int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname IN ('events_append_only', 'events_no_truncate', 'digests_append_only')
		AND tgrelid IN ('events'::regclass, 'digests'::regclass)`).Scan(&triggers); err != nil || triggers != 3 {
		t.Fatalf("%d of the 3 append-only triggers (%v)", triggers, err)
	}
	if rep, err := audit.Run(ctx, pool, audit.Options{}); err != nil || len(rep.Differences) != 0 {
		t.Fatalf("audit of a fresh database: %+v, %v", rep, err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	d, err := audit.TakeDigest(ctx, pool, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if drep, err := audit.VerifyDigest(ctx, pool, d, 1); err != nil || len(drep.Differences) != 0 {
		t.Fatalf("verify a fresh database: %+v, %v", drep, err)
	}
}

// Partitions kyapi restore attached before it gave them the TRUNCATE trigger get one from the
// migration: after it, no partition of the store can be emptied.
func TestPartitionsRestoredWithoutTheTruncateTriggerGetIt(t *testing.T) {
	ctx := context.Background()
	pool := databaseThrough(t, "0017_sparse_events.sql")
	// As restore used to: a partition made LIKE events and attached, nothing more.
	if _, err := pool.Exec(ctx, `CREATE TABLE events_p_restored (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
		ALTER TABLE events ATTACH PARTITION events_p_restored FOR VALUES FROM (-1000) TO (1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE events_p_restored`); err != nil {
		t.Fatalf("before the migration the partition can be emptied, which is what it mends: %v", err)
	}
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var unprotected []string
	rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'events'::regclass AND NOT EXISTS (SELECT 1 FROM pg_trigger t
			WHERE t.tgrelid = c.oid AND t.tgname = 'events_no_truncate') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		unprotected = append(unprotected, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(unprotected) != 0 {
		t.Fatalf("partitions without the TRUNCATE trigger after migrating: %v", unprotected)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE events_p_restored`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("TRUNCATE of the mended partition: %v, want the append-only refusal", err)
	}
}

// databaseThrough is a new database as the migrations up to and including last leave it.
func databaseThrough(t *testing.T, last string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// NewDatabase migrated it fully: start again from an empty schema.
	if _, err := pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.ApplyThrough(ctx, pool, last); err != nil {
		t.Fatal(err)
	}
	return pool
}

// Migration 0019 keeps every stored detail but marks it as holding for no instant, so that
// every process — this version's and, during a roll, the previous one's — renders the place
// afresh (with field_trust's new null entries) rather than serve the old rendering or none.
func TestStoredDetailsRenderedBeforeTheNewFieldTrustHoldForNoInstant(t *testing.T) {
	ctx := context.Background()
	pool := databaseThrough(t, "0018_restored_partitions_no_truncate.sql")
	if _, err := pool.Exec(ctx, `INSERT INTO rm_places (place_id, name, normalized_name, category, is_gem, marked_chain, is_chain,
			doc, has_menu, has_review, version, updated_at, row_json, detail_json, trust_from, trust_until)
		VALUES ('p1', 'P', 'p', 'food', false, false, false, '{}', false, false, 1, now(), '{"place_id":"p1",', ',"field_trust":{}}', NULL, NULL),
		       ('p2', 'Q', 'q', 'food', false, false, false, '{}', false, false, 1, now(), NULL, NULL, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var detail, until *string
	if err := pool.QueryRow(ctx, `SELECT detail_json, to_char(trust_until AT TIME ZONE 'UTC', 'YYYY-MM-DD') FROM rm_places WHERE place_id = 'p1'`).Scan(&detail, &until); err != nil {
		t.Fatal(err)
	}
	if detail == nil || *detail != `,"field_trust":{}}` || until == nil || *until != "1970-01-01" {
		t.Fatalf("p1 after 0019: detail %v, trust_until %v; want the detail kept, its window ended in 1970", detail, until)
	}
	var untouched bool
	if err := pool.QueryRow(ctx, `SELECT trust_until IS NULL FROM rm_places WHERE place_id = 'p2'`).Scan(&untouched); err != nil || !untouched {
		t.Fatalf("p2, never rendered, is left as it was: %v %v", untouched, err)
	}
}

// kyapi_charge (migration 0023) moves each stream it was given to check to the hash and
// position of its newest event in the batch, and a batch with events of a stream it was not
// given to check raises KY001 with nothing written.
func TestTheChargeFunctionMovesEachHeadToItsNewestEventOrRaises(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var no int32
	if err := pool.QueryRow(ctx, `INSERT INTO streams (stream_id) VALUES ('account-acc_charge_fn') RETURNING stream_no`).Scan(&no); err != nil {
		t.Fatal(err)
	}
	h1, h2 := make([]byte, 32), make([]byte, 32)
	h1[0], h2[0] = 1, 2
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	call := func(checked []int32, versions []int64) (headNos []int32, positions []int64, err error) {
		err = pool.QueryRow(ctx, `SELECT head_nos, head_positions FROM kyapi_charge($1, $2,
			'{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
			$3, $4, $5, $6, $7, $8, $9)`,
			checked, versions,
			[]int32{no, no}, []int64{1, 2}, []time.Time{at, at}, []string{"RequestCharged", "RequestCharged"},
			[][]byte{h1, h2}, []string{`{"k":1}`, `{"k":2}`}, []string{`{}`, `{}`}).Scan(&headNos, &positions)
		return headNos, positions, err
	}

	if _, _, err := call([]int32{}, []int64{}); err == nil || !strings.Contains(err.Error(), "KY001") {
		t.Fatalf("events of a stream not checked: %v; want KY001", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE stream_no = $1`, no).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events written by the refused batch (%v)", n, err)
	}

	headNos, positions, err := call([]int32{no}, []int64{0})
	if err != nil || len(headNos) != 1 || headNos[0] != no {
		t.Fatalf("heads %v %v", headNos, err)
	}
	var version, position int64
	var hash []byte
	if err := pool.QueryRow(ctx, `SELECT version, head_hash, head_position FROM streams WHERE stream_no = $1`, no).Scan(&version, &hash, &position); err != nil {
		t.Fatal(err)
	}
	var newest int64
	if err := pool.QueryRow(ctx, `SELECT position FROM events WHERE stream_no = $1 AND version = 2`, no).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	if version != 2 || string(hash) != string(h2) || position != newest || positions[0] != newest {
		t.Fatalf("head v%d hash %x at %d (returned %v); want v2 hash %x at %d", version, hash, position, positions, h2, newest)
	}
}

// The partitions function runs as its owner with a search_path fixed to the schema the events
// table is in, not to the migrating session's first schema: a role with a schema of its own
// name ("$user" comes first in the default search_path) pinned it there, and partitions could
// no longer be made ahead of the appends.
func TestThePartitionFunctionSearchesTheSchemaOfTheEvents(t *testing.T) {
	ctx := context.Background()
	pool := databaseThrough(t, "0030_no_chain_by_an_empty_name.sql")
	var user string
	if err := pool.QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{user}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT kyapi_ensure_event_partitions(4)`); err != nil {
		t.Fatalf("partitions ahead, after migrating as a role with a schema of its own: %v", err)
	}
}
