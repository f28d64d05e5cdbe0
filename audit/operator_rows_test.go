package audit_test

import (
	"strings"
	"testing"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// What the write model says of an account beyond its money — its name and email, its own rate
// limit (what the read API enforces), and its keys' last four characters (how operators tell
// keys apart) — is held to the facts too: an edited row is a difference.
func TestAnAccountsNameRateLimitAndKeyLast4AreHeldToTheirFacts(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 1)
	fresh := newWorld(t, pool, 0)
	limit := int64(120)
	if err := w.accounts.SetRateLimit(ctx, w.account, &limit, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("consistent database: %s", out)
	}
	saveRows(t, pool, "api_keys")
	for _, c := range []struct {
		name, account, sql, want string
	}{
		{"name", w.account, `UPDATE accounts SET name = 'Other Co' WHERE account_id = $1`,
			`account ACC: write-model name "Other Co" and email "audit@test.example", its AccountOpened (v1) "Audit Co" and "audit@test.example"`},
		{"email", w.account, `UPDATE accounts SET email = 'x@test.example' WHERE account_id = $1`,
			`account ACC: write-model name "Audit Co" and email "x@test.example"`},
		{"rate limit", w.account, `UPDATE accounts SET rate_limit_per_minute = 5 WHERE account_id = $1`,
			`account ACC: write-model rate_limit_per_minute 5, its facts 120`},
		{"rate limit back to the default", w.account, `UPDATE accounts SET rate_limit_per_minute = NULL WHERE account_id = $1`,
			`account ACC: write-model rate_limit_per_minute none, its facts 120`},
		{"rate limit never set", fresh.account, `UPDATE accounts SET rate_limit_per_minute = 7 WHERE account_id = $1`,
			`account FRESH: write-model rate_limit_per_minute 7, its facts none`},
		{"key last4", w.account, `UPDATE api_keys SET last4 = 'zzzz' WHERE account_id = $1`,
			`has last4 "zzzz", its KeyIssued (v2)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := pool.Exec(ctx, c.sql, c.account); err != nil {
				t.Fatal(err)
			}
			defer restoreRows(t, pool, "api_keys")
			defer func() {
				if _, err := pool.Exec(ctx, `UPDATE accounts SET name = 'Audit Co', email = 'audit@test.example',
					rate_limit_per_minute = CASE WHEN account_id = $1 THEN 120 END WHERE account_id IN ($1, $2)`, w.account, fresh.account); err != nil {
					t.Fatal(err)
				}
			}()
			want := strings.NewReplacer("ACC", w.account, "FRESH", fresh.account).Replace(c.want)
			for _, o := range []audit.Options{{}, {AccountID: c.account}} {
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
