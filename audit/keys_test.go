package audit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// keyOf is the id of the account's key with number no.
func keyOf(t *testing.T, w world, no int) string {
	t.Helper()
	var id string
	if err := w.pool.QueryRow(ctx, `SELECT key_id FROM api_keys WHERE account_id = $1 AND key_no = $2`, w.account, no).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// chargeAt charges a place detail with the world's key, by a meter of its own whose clock says
// at (so that it reads the key afresh from api_keys).
func chargeAt(t *testing.T, w world, at time.Time, n int) {
	t.Helper()
	meter := commands.NewMeter(eventstore.New(w.pool), func() time.Time { return at }, commands.MeterOptions{})
	defer meter.Close()
	caller, err := meter.Authenticate(ctx, w.caller.KeyHash)
	if err != nil {
		t.Fatalf("setup: the key: %v", err)
	}
	for i := range n {
		if _, err := meter.Charge(ctx, commands.ChargeRequest{Caller: caller, Operation: domain.OpPlaceDetail,
			Resources: []string{domain.PlaceResource("late-" + string(rune('a'+i%26)))}}); err != nil {
			t.Fatalf("setup: charge with the key: %v", err)
		}
	}
}

// docs/api.md ("Keys"): no charge event of a key is recorded after its revocation. A revoked key
// set active again with one UPDATE of api_keys is charged; the audit names the charges recorded
// after the key's KeyRevoked fact (and the row that disagrees with the facts).
func TestAChargeByARevokedKeyIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	keyID := keyOf(t, w, 1)
	if err := w.accounts.RevokeKey(ctx, w.account, keyID, "compromised", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("consistent database: %s", out)
	}
	if _, err := pool.Exec(ctx, `UPDATE api_keys SET state = 'active', revoked_at = NULL WHERE key_id = $1`, keyID); err != nil {
		t.Fatal(err)
	}
	chargeAt(t, w, noon, 1)
	catchUp(t, pool)
	charged := "account " + w.account + ": key " + keyID + " (no. 1) was revoked at v6 (" + noon.Format(time.RFC3339Nano) + ") and charged after it: 1 charges, v7"
	row := "account " + w.account + ": api_keys row of key " + keyID + " (no. 1) is active, its facts say revoked"
	for _, o := range []audit.Options{{}, {AccountID: w.account}} {
		if _, out := run(t, pool, o); !strings.Contains(out, charged) || !strings.Contains(out, row) {
			t.Errorf("audit %q of a ledger charging key %s after its KeyRevoked fact: differences\n%s\nwant\n%s\n%s", o.AccountID, keyID, out, charged, row)
		}
	}
}

// A long stream is audited in segments, each read without the key facts before it: a key
// revoked in one segment and charged in the next is a difference all the same, as in one pass.
func TestAKeyRevokedInOneSegmentAndChargedInTheNextIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 300) // v1 to v303; stream marks every 256 versions
	keyID := keyOf(t, w, 1)
	if err := w.accounts.RevokeKey(ctx, w.account, keyID, "compromised", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE api_keys SET state = 'active', revoked_at = NULL WHERE key_id = $1`, keyID); err != nil {
		t.Fatal(err)
	}
	chargeAt(t, w, noon, 300) // v305 to v604: in the segment of the revocation and the next
	catchUp(t, pool)
	revoked := "account " + w.account + ": key " + keyID + " (no. 1) was revoked at v304"
	for _, c := range []struct {
		opts audit.Options
		runs []string // the charges named
	}{
		{audit.Options{}, []string{"300 charges, v305"}},
		{audit.Options{SegmentEvents: 256, Workers: 2}, []string{"207 charges, v305", "93 charges, v512"}},
		{audit.Options{AccountID: w.account, SegmentEvents: 256}, []string{"207 charges, v305", "93 charges, v512"}},
	} {
		_, out := run(t, pool, c.opts)
		for _, r := range c.runs {
			if !strings.Contains(out, revoked+" ("+noon.Format(time.RFC3339Nano)+") and charged after it: "+r) {
				t.Errorf("audit %+v: differences\n%s\nwant %q naming %q", c.opts, out, revoked, r)
			}
		}
	}
}

// docs/api.md ("Keys"): no charge event of a key is recorded after its grace_until. A rotated
// key whose grace was lengthened in api_keys is charged after the grace its rotation recorded:
// a difference.
func TestAChargeAfterItsKeysGraceIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	if _, err := w.accounts.IssueKey(ctx, w.account, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	keyID := keyOf(t, w, 1)
	grace := noon.Add(domain.GracePeriod)
	chargeAt(t, w, grace.Add(-time.Microsecond), 1) // the last instant of its grace: fine
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("consistent database: %s", out)
	}
	if _, err := pool.Exec(ctx, `UPDATE api_keys SET grace_until = grace_until + interval '1 day' WHERE key_id = $1`, keyID); err != nil {
		t.Fatal(err)
	}
	chargeAt(t, w, grace, 1)
	catchUp(t, pool)
	want := "account " + w.account + ": key " + keyID + " (no. 1) was charged at or after the grace_until " + grace.Format(time.RFC3339Nano) +
		" its rotation at v6 recorded: v8 (position 8) at " + grace.Format(time.RFC3339Nano) + ", the last of 2 charges from v7"
	for _, o := range []audit.Options{{}, {AccountID: w.account}} {
		if _, out := run(t, pool, o); !strings.Contains(out, want) || !strings.Contains(out, "has grace_until") {
			t.Errorf("audit %q: differences\n%s\nwant %q and the row's grace_until", o.AccountID, out, want)
		}
	}
}

// The api_keys rows are the keys' write model, and authentication trusts them: each must say
// what the account's key facts say (number, hash, state, grace_until, revoked_at), and each row
// must be of a key its account issued.
func TestAnAPIKeysRowThatDisagreesWithItsKeyFactsIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	// Two rotations: key 1 goes into grace, then is revoked by the second; key 2 is in grace,
	// key 3 active.
	for range 2 {
		if _, err := w.accounts.IssueKey(ctx, w.account, eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("consistent database: %s", out)
	}
	r := strings.NewReplacer("K1", keyOf(t, w, 1), "K2", keyOf(t, w, 2), "K3", keyOf(t, w, 3))
	saveRows(t, pool, "api_keys")
	for _, c := range []struct {
		name, sql, want string // K1, K2, K3: the keys numbered 1 (revoked), 2 (in grace) and 3 (active)
	}{
		{"revoked key set active", `UPDATE api_keys SET state = 'active', revoked_at = NULL WHERE key_id = 'K1'`,
			"api_keys row of key K1 (no. 1) is active, its facts say revoked"},
		{"revocation moved later", `UPDATE api_keys SET revoked_at = revoked_at + interval '1 hour' WHERE key_id = 'K1'`,
			"api_keys row of key K1 (no. 1) has revoked_at"},
		{"grace lengthened", `UPDATE api_keys SET grace_until = grace_until + interval '1 day' WHERE key_id = 'K2'`,
			"api_keys row of key K2 (no. 2) has grace_until"},
		{"active key revoked", `UPDATE api_keys SET state = 'revoked', revoked_at = now() WHERE key_id = 'K3'`,
			"api_keys row of key K3 (no. 3) is revoked, its facts say active"},
		{"hash replaced", `UPDATE api_keys SET key_hash = '\x00' WHERE key_id = 'K3'`,
			"api_keys row of key K3 (no. 3) has key_hash 00"},
		{"number changed", `UPDATE api_keys SET key_no = 9 WHERE key_id = 'K3'`,
			"api_keys row of key K3 has number 9, its KeyIssued (v8) 3"},
		{"row deleted", `DELETE FROM api_keys WHERE key_id = 'K3'`,
			"key K3 (no. 3), issued at v8, has no api_keys row of the account"},
		{"row added", `INSERT INTO api_keys (key_id, key_no, key_hash, account_id, last4, state, issued_at)
			SELECT 'key_forged', 4, '\xff', account_id, 'abcd', 'active', now() FROM api_keys WHERE key_id = 'K3'`,
			"api_keys row of key key_forged (no. 4) has no KeyIssued in the account's stream"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := pool.Exec(ctx, r.Replace(c.sql)); err != nil {
				t.Fatal(err)
			}
			defer restoreRows(t, pool, "api_keys")
			want := "account " + w.account + ": " + r.Replace(c.want)
			for _, o := range []audit.Options{{}, {AccountID: w.account}} {
				if _, out := run(t, pool, o); !strings.Contains(out, want) {
					t.Errorf("audit %q: differences\n%s\nwant one with %q", o.AccountID, out, want)
				}
			}
		})
	}
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("restored: %s", out)
	}
}

// saveRows copies a write-model table aside, for restoreRows to put back after each edit.
func saveRows(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	if _, err := pool.Exec(ctx, `CREATE TABLE saved_`+table+` AS SELECT * FROM `+table); err != nil {
		t.Fatal(err)
	}
}

func restoreRows(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	if _, err := pool.Exec(ctx, `DELETE FROM `+table+`; INSERT INTO `+table+` SELECT * FROM saved_`+table); err != nil {
		t.Fatal(err)
	}
}
