package audit_test

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// ledgerFacts counts the account's facts of type typ whose payload field is value.
func ledgerFacts(t *testing.T, w world, typ, field, value string) int {
	t.Helper()
	rows, err := w.pool.Query(ctx, `SELECT e.payload::text FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = $1 AND e.type = $2`,
		domain.AccountStream(w.account), typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			t.Fatal(err)
		}
		if p[field] == value {
			n++
		}
	}
	return n
}

// A payment is counted once and a bonus once per outage and account (docs/architecture.md,
// "A payment is counted once"): the purchases and bonus_grants rows of the write model are what
// enforce it, and no append-only trigger guards them. With a plain DELETE (or UPDATE) of a row
// there, the same payment or outage is credited a second time through the ordinary command:
// the audit names the payment_ref credited twice (and the outage credited twice to one
// account), in a whole-store audit and in the account's own.
func TestAPaymentOrBonusCreditedTwiceIsADifference(t *testing.T) {
	t.Run("purchase", func(t *testing.T) {
		pool := pgtest.NewPool(t)
		w := newWorld(t, pool, 3)
		catchUp(t, pool)
		if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
			t.Fatalf("consistent database: %s", out)
		}
		ref := "pay-" + w.account
		if _, err := pool.Exec(ctx, `DELETE FROM purchases WHERE payment_ref = $1`, ref); err != nil {
			t.Fatal(err)
		}
		res, err := w.accounts.Purchase(ctx, w.account, 500, ref, eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		catchUp(t, pool)
		n := ledgerFacts(t, w, domain.EventCreditsPurchased, "payment_ref", ref)
		t.Logf("the same payment_ref again: replayed %v, credits added %d; the ledger holds %d CreditsPurchased under %q", res.Replayed, res.CreditsAdded, n, ref)
		if n != 2 {
			t.Fatalf("setup: %d purchases under %q, want 2", n, ref)
		}
		for _, o := range []audit.Options{{}, {AccountID: w.account}} {
			rep, out := run(t, pool, o)
			// Both facts are named, by stream and version, oldest first.
			twice := regexp.MustCompile(`payment "` + ref + `": credited 2 times \(account-` + w.account + ` v(\d+), account-` + w.account + ` v(\d+)\)`)
			if m := twice.FindStringSubmatch(out); m == nil || atoi(t, m[1]) >= atoi(t, m[2]) {
				t.Errorf("audit %q of a ledger crediting payment %q twice: %d differences\n%s", o.AccountID, ref, len(rep.Differences), out)
			}
		}
	})
	t.Run("bonus", func(t *testing.T) {
		pool := pgtest.NewPool(t)
		w := newWorld(t, pool, 3)
		if _, err := w.accounts.GrantBonus(ctx, "outage-1", 100, "down", eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
		catchUp(t, pool)
		if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
			t.Fatalf("consistent database: %s", out)
		}
		// Set the grant's progress back, as a crash before its first chunk would have left it:
		// the next kyapi serve (ResumeGrants) or the same POST finishes it "from where it stopped".
		if _, err := pool.Exec(ctx, `UPDATE bonus_grants SET state = 'running', after_account = '', accounts = 0, finished_at = NULL WHERE outage_id = 'outage-1'`); err != nil {
			t.Fatal(err)
		}
		if err := w.accounts.ResumeGrants(ctx, eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
		catchUp(t, pool)
		n := ledgerFacts(t, w, domain.EventBonusGranted, "outage_id", "outage-1")
		if n != 2 {
			t.Fatalf("setup: %d bonuses for outage-1, want 2", n)
		}
		for _, o := range []audit.Options{{}, {AccountID: w.account}} {
			rep, out := run(t, pool, o)
			if !regexp.MustCompile(`account ` + w.account + `: outage "outage-1" credited 2 times \(v\d+, v\d+\)`).MatchString(out) {
				t.Errorf("audit %q of a ledger crediting outage-1 twice to %s: %d differences\n%s", o.AccountID, w.account, len(rep.Differences), out)
			}
		}
	})
}

// Each CreditsPurchased fact has exactly its purchases row (same account, credits, cents and
// balance after) and each row its fact; each BonusGranted fact is of a grant bonus_grants holds,
// for the grant's credits, and a grant counts the accounts its facts credited. A row deleted,
// added or edited is a difference before anything is credited again.
func TestPaymentAndGrantRowsAgreeWithTheirFacts(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 3)
	other := newWorld(t, pool, 1)
	if _, err := w.accounts.GrantBonus(ctx, "outage-1", 100, "down", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("consistent database: %s", out)
	}
	r := strings.NewReplacer("ACC", w.account, "REF", "pay-"+w.account, "OTHER", other.account)
	saveRows(t, pool, "purchases")
	saveRows(t, pool, "bonus_grants")
	for _, c := range []struct {
		name, sql, want string // in sql and want, ACC is the account, REF its payment, OTHER another account
		wholeOnly       bool
	}{
		{"payment row deleted", `DELETE FROM purchases WHERE payment_ref = 'REF'`,
			`account ACC: payment "REF" (account-ACC v3) has no purchases row`, false},
		{"payment row added", `INSERT INTO purchases (payment_ref, account_id, amount_cents, credits_added, balance_after, recorded_at)
			VALUES ('forged', 'ACC', 500, 1000, 1000, now())`,
			`account ACC: purchases row "forged" (1000 credits, 500 cents) has no CreditsPurchased fact`, false},
		{"payment row moved to another account", `UPDATE purchases SET account_id = 'OTHER' WHERE payment_ref = 'REF'`,
			`account ACC: payment "REF" (account-ACC v3) credits 1000 for 500 cents, balance after 1000; its purchases row says account OTHER`, false},
		{"payment row credits", `UPDATE purchases SET credits_added = 1001 WHERE payment_ref = 'REF'`,
			`its purchases row says account ACC, 1001 credits`, false},
		// What the row says of the payment's time is read back (the console's "already
		// recorded ... on"): it is its fact's.
		{"payment row time", `UPDATE purchases SET recorded_at = recorded_at + interval '1 day' WHERE payment_ref = 'REF'`,
			`account ACC: payment "REF" (account-ACC v3) was recorded at`, false},
		{"grant deleted", `DELETE FROM bonus_grants WHERE outage_id = 'outage-1'`,
			`account ACC: BonusGranted of outage "outage-1" (v7), which bonus_grants does not hold`, false},
		{"grant credits", `UPDATE bonus_grants SET credits = 7 WHERE outage_id = 'outage-1'`,
			`account ACC: BonusGranted of outage "outage-1" (v7) credits 100, its grant 7`, false},
		{"grant reason", `UPDATE bonus_grants SET reason = 'maintenance' WHERE outage_id = 'outage-1'`,
			`account ACC: BonusGranted of outage "outage-1" (v7) gives the reason "down", its grant "maintenance"`, false},
		// A grant's accounts are counted in a whole-store audit.
		{"grant accounts", `UPDATE bonus_grants SET accounts = 1 WHERE outage_id = 'outage-1'`,
			`bonus grant "outage-1": credited 1 accounts, but the store holds 2 BonusGranted facts of it`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := pool.Exec(ctx, r.Replace(c.sql)); err != nil {
				t.Fatal(err)
			}
			defer restoreRows(t, pool, "bonus_grants")
			defer restoreRows(t, pool, "purchases")
			want := r.Replace(c.want)
			for _, o := range []audit.Options{{}, {AccountID: w.account}} {
				if c.wholeOnly && o.AccountID != "" {
					continue
				}
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

// A finished grant credited every account that had an active or grace key at its granted_at:
// an account that had one and no BonusGranted of the outage is a difference (a grant that
// skipped it, or a granted_at edited after the grant).
func TestAnEligibleAccountAFinishedGrantDidNotCreditIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 1)
	if _, err := w.accounts.GrantBonus(ctx, "outage-1", 100, "down", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	late := newWorld(t, pool, 1) // its key is recorded after the grant's instant: not eligible
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("consistent database: %s", out)
	}
	var grantedAt string
	if err := pool.QueryRow(ctx, `UPDATE bonus_grants SET granted_at = granted_at + interval '1 second' WHERE outage_id = 'outage-1'
		RETURNING to_char(granted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`).Scan(&grantedAt); err != nil {
		t.Fatal(err)
	}
	want := `account ` + late.account + `: no BonusGranted of outage "outage-1", but at the grant's granted_at ` + grantedAt + ` the account had an active or grace key`
	for _, o := range []audit.Options{{}, {AccountID: late.account}} {
		if _, out := run(t, pool, o); !strings.Contains(out, want) {
			t.Errorf("audit %q: differences\n%s\nwant one with %q", o.AccountID, out, want)
		}
	}
	if rep, out := run(t, pool, audit.Options{AccountID: w.account}); len(rep.Differences) != 0 {
		t.Errorf("audit of the credited account: %s", out)
	}
	// A grant still running has not credited everyone yet: nothing is missing from it.
	if _, err := pool.Exec(ctx, `UPDATE bonus_grants SET state = 'running' WHERE outage_id = 'outage-1'`); err != nil {
		t.Fatal(err)
	}
	if _, out := run(t, pool, audit.Options{}); strings.Contains(out, "no BonusGranted") {
		t.Errorf("audit while the grant runs: %s", out)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
