package audit_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// An account row's claims_day and claims_from say where the meter reads the account's dedup
// claims of the day from: the UTC day of its newest RequestCharged and the position of its
// first that day. Either edited is a difference — the meter would charge again for what was
// paid that day, or take for paid what was not — and so are claims on an account never charged.
func TestAnAccountsClaimsStartIsHeldToItsCharges(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 3)
	fresh := newWorld(t, pool, 0)
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("consistent database: %s", out)
	}
	var day string
	var from, first int64
	if err := pool.QueryRow(ctx, `SELECT to_char(a.claims_day, 'YYYY-MM-DD'), a.claims_from,
			(SELECT min(e.position) FROM events e WHERE e.stream_no = a.stream_no AND e.type = 'RequestCharged')
		FROM accounts a WHERE a.account_id = $1`, w.account).Scan(&day, &from, &first); err != nil {
		t.Fatal(err)
	}
	if day != "2026-11-23" || from != first {
		t.Fatalf("the meter left claims_day %s, claims_from %d; want 2026-11-23 and the first charge's position %d", day, from, first)
	}
	pos, next := strconv.FormatInt(from, 10), strconv.FormatInt(from+1, 10)
	for _, c := range []struct {
		name, account, sql, want string
	}{
		{"claims_from moved on", w.account, `UPDATE accounts SET claims_from = claims_from + 1 WHERE account_id = $1`,
			"account " + w.account + ": write-model claims_day 2026-11-23 and claims_from " + next + ", but its first RequestCharged of 2026-11-23 is at position " + pos},
		{"claims_day set back", w.account, `UPDATE accounts SET claims_day = '2026-11-22' WHERE account_id = $1`,
			"account " + w.account + ": write-model claims_day 2026-11-22 and claims_from " + pos + ", but its newest RequestCharged is of 2026-11-23 (its first that day at position " + pos + ")"},
		{"claims lost", w.account, `UPDATE accounts SET claims_day = NULL, claims_from = NULL WHERE account_id = $1`,
			"account " + w.account + ": write-model no claims_day and no claims_from, but its newest RequestCharged is of 2026-11-23"},
		{"claims of an account never charged", fresh.account, `UPDATE accounts SET claims_day = '2026-11-23', claims_from = 1 WHERE account_id = $1`,
			"account " + fresh.account + ": write-model claims_day 2026-11-23 and claims_from 1, but the account has no RequestCharged"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := pool.Exec(ctx, c.sql, c.account); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if _, err := pool.Exec(ctx, `UPDATE accounts SET claims_day = CASE WHEN account_id = $1 THEN $2::date END,
					claims_from = CASE WHEN account_id = $1 THEN $3::bigint END WHERE account_id IN ($1, $4)`, w.account, day, from, fresh.account); err != nil {
					t.Fatal(err)
				}
			}()
			for _, o := range []audit.Options{{}, {AccountID: c.account}} {
				if _, out := run(t, pool, o); !strings.Contains(out, c.want) {
					t.Errorf("audit %q: differences\n%s\nwant one with %q", o.AccountID, out, c.want)
				}
			}
		})
	}
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("restored: %s", out)
	}
}
