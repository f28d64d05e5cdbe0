package audit_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A bonus is granted once per outage and account (docs/architecture.md, "A payment is counted
// once"), and the audit names an outage credited twice to an account. Once the account's first
// BonusGranted of the outage is archived, its boundary state lists it (archive.AccountState's
// bonuses): the grant set running again in bonus_grants (state, after_account, accounts) and
// run again credits the account a second time, and the audit names the outage credited twice,
// the archived fact first, in a whole-store audit and in the account's own; the whole-store
// audit also counts the archived fact among the grant's accounts.
func TestAnOutageCreditedBeforeAndAgainAfterTheBoundaryIsCreditedTwice(t *testing.T) {
	s := newArchivedStore(t)
	s.at(archivedStart.Add(time.Hour))
	if _, err := s.accounts.GrantBonus(ctx, "outage-rk", 100, "down", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	s.fill(t, 1000) // the grant's fact stays in the first partition
	s.at(archivedStart.Add(2 * time.Hour))
	s.exec(t, `UPDATE bonus_grants SET state = 'running', after_account = '', accounts = 0, finished_at = NULL WHERE outage_id = 'outage-rk'`)
	if _, err := s.accounts.GrantBonus(ctx, "outage-rk", 100, "down", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	var bonus int64
	if err := s.pool.QueryRow(ctx, `SELECT bonus_credits FROM accounts WHERE account_id = $1`, s.account).Scan(&bonus); err != nil || bonus != 200 {
		t.Fatalf("setup: bonus credits %d (%v), want 200: outage-rk credited twice", bonus, err)
	}
	s.catchUp(t)
	twice := "account " + s.account + `: outage "outage-rk" credited 2 times`
	if d := s.audit(t, audit.Options{}); !strings.Contains(d, twice) {
		t.Fatalf("control (nothing archived): differences\n%s\nwant %q", d, twice)
	}
	s.archiveFirstPartition(t) // the first BonusGranted of outage-rk is archived, the second is not
	archived := regexp.MustCompile(regexp.QuoteMeta(twice) + ` \(v4 \(archived\), v\d+\)`)
	counted := `bonus grant "outage-rk": credited 1 accounts, but the store holds 2 BonusGranted facts of it`
	for _, o := range []audit.Options{{}, {AccountID: s.account}} {
		d := s.audit(t, o)
		if !archived.MatchString(d) {
			t.Errorf("audit %q: differences\n%s\nwant %q (the archived fact, then the one in the store)", o.AccountID, d, archived)
		}
		if o.AccountID == "" && !strings.Contains(d, counted) {
			t.Errorf("whole-store audit: differences\n%s\nwant %q", d, counted)
		}
	}
}

// A payment is counted once (docs/architecture.md, "A payment is counted once"). Once its fact
// is archived, the account's boundary state lists its payment_ref (archive.AccountState's
// payments), and its purchases row is matched with it by reference: a row renamed (which keeps
// the number, credits and cents the archived daily sums count) frees the payment_ref, and the
// same payment credited again is named credited twice, the archived fact first; the renamed
// row has no fact.
func TestAnArchivedPaymentRenamedAndCreditedAgainIsCreditedTwice(t *testing.T) {
	s := newArchivedStore(t) // "pay-<account>": 500 cents, 1000 credits, at archivedStart
	ref := "pay-" + s.account
	s.fill(t, 1000)
	s.exec(t, `UPDATE purchases SET payment_ref = payment_ref || '-old' WHERE payment_ref = $1`, ref)
	s.at(archivedStart.Add(2 * time.Hour))
	res, err := s.accounts.Purchase(ctx, s.account, 500, ref, eventstore.Metadata{})
	if err != nil || res.Replayed {
		t.Fatalf("setup: the same payment_ref again: %+v, %v", res, err)
	}
	s.catchUp(t)
	twice := `payment "` + ref + `": credited 2 times`
	if d := s.audit(t, audit.Options{}); !strings.Contains(d, twice) {
		t.Fatalf("control (nothing archived): differences\n%s\nwant %q", d, twice)
	}
	s.archiveFirstPartition(t) // the first CreditsPurchased of ref is archived, the second is not
	stream := domain.AccountStream(s.account)
	archived := regexp.MustCompile(regexp.QuoteMeta(twice+" ("+stream+" v3 (archived), "+stream+" v") + `\d+\)`)
	renamed := "account " + s.account + `: purchases row "` + ref + `-old" (1000 credits, 500 cents) has no CreditsPurchased fact`
	for _, o := range []audit.Options{{}, {AccountID: s.account}} {
		d := s.audit(t, o)
		if !archived.MatchString(d) || !strings.Contains(d, renamed) {
			t.Errorf("audit %q: differences\n%s\nwant %q and %q", o.AccountID, d, archived, renamed)
		}
	}
}

// The purchases and bonus_grants rows of archived facts are checked against the facts the
// account's boundary state lists, as those of facts in the store are against the facts: a row
// deleted, added or edited is a difference naming the archived fact; a grant's accounts count
// includes its archived facts; and a list that no longer adds up to the archived totals and
// daily sums (a fact taken out of it) is a difference. A boundary that lists neither (archived
// before they were listed) audits clean with the older checks (docs/operations.md, "Retention
// and archiving").
func TestRowsOfArchivedPaymentsAndBonusesAgreeWithTheFactsTheBoundaryLists(t *testing.T) {
	s := newArchivedStore(t) // "pay-<account>" at v3: 500 cents, 1000 credits
	// Another account, with no key: the grant does not credit it.
	other, err := s.accounts.OpenAccount(ctx, "Other Co", "other@test.example", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	s.at(archivedStart.Add(time.Hour))
	if _, err := s.accounts.GrantBonus(ctx, "outage-a", 100, "down", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	s.fill(t, 1000)
	s.archiveFirstPartition(t) // both facts archived
	if d := s.audit(t, audit.Options{}); d != "" {
		t.Fatalf("consistent database: differences\n%s", d)
	}
	var listed int64
	if err := s.pool.QueryRow(ctx, `SELECT jsonb_array_length(b.account->'payments') + jsonb_array_length(b.account->'bonuses')
		FROM stream_boundaries b JOIN streams st USING (stream_no) WHERE st.stream_id = $1`, domain.AccountStream(s.account)).Scan(&listed); err != nil || listed != 2 {
		t.Fatalf("setup: the boundary lists %d payments and bonuses (%v), want 2", listed, err)
	}
	for _, table := range []string{"purchases", "bonus_grants", "stream_boundaries"} {
		saveRows(t, s.pool, table)
	}
	restore := func() {
		restoreRows(t, s.pool, "purchases")
		restoreRows(t, s.pool, "bonus_grants")
		s.exec(t, `UPDATE stream_boundaries b SET account = v.account FROM saved_stream_boundaries v WHERE v.stream_no = b.stream_no`)
	}
	r := strings.NewReplacer("ACC", s.account, "REF", "pay-"+s.account, "OTHER", other)
	onAccount := `UPDATE stream_boundaries b SET account = EDIT FROM streams st WHERE st.stream_no = b.stream_no AND st.stream_id = 'account-ACC'`
	for _, c := range []struct {
		name, sql, want string // in sql and want, ACC is the account, REF its payment, OTHER another account
		wholeOnly       bool
	}{
		{"payment row deleted", `DELETE FROM purchases WHERE payment_ref = 'REF'`,
			`account ACC: payment "REF" (account-ACC v3 (archived)) has no purchases row`, false},
		{"payment row added", `INSERT INTO purchases (payment_ref, account_id, amount_cents, credits_added, balance_after, recorded_at)
			VALUES ('forged', 'ACC', 500, 1000, 1000, now())`,
			`account ACC: purchases row "forged" (1000 credits, 500 cents) has no CreditsPurchased fact`, false},
		{"payment row credits", `UPDATE purchases SET credits_added = 1001 WHERE payment_ref = 'REF'`,
			`account ACC: payment "REF" (account-ACC v3 (archived)) credits 1000 for 500 cents, balance after 1000; its purchases row says account ACC, 1001 credits`, false},
		{"payment row moved to another account", `UPDATE purchases SET account_id = 'OTHER' WHERE payment_ref = 'REF'`,
			`account ACC: payment "REF" (account-ACC v3 (archived)) credits 1000 for 500 cents, balance after 1000; its purchases row says account OTHER`, false},
		{"grant deleted", `DELETE FROM bonus_grants WHERE outage_id = 'outage-a'`,
			`account ACC: BonusGranted of outage "outage-a" (v4 (archived)), which bonus_grants does not hold`, false},
		{"grant credits", `UPDATE bonus_grants SET credits = 7 WHERE outage_id = 'outage-a'`,
			`account ACC: BonusGranted of outage "outage-a" (v4 (archived)) credits 100, its grant 7`, false},
		{"grant accounts", `UPDATE bonus_grants SET accounts = 2 WHERE outage_id = 'outage-a'`,
			`bonus grant "outage-a": credited 2 accounts, but the store holds 1 BonusGranted facts of it`, true},
		{"payment taken out of the list", strings.Replace(onAccount, "EDIT", `jsonb_set(b.account, '{payments}', '[]')`, 1),
			`account ACC: its history archived up to v4 holds 1 purchases (1000 credits, 500 cents) by its archived totals and daily sums, but its boundary lists 0 (0 credits, 0 cents)`, false},
		{"bonus taken out of the list", strings.Replace(onAccount, "EDIT", `jsonb_set(b.account, '{bonuses}', '[]')`, 1),
			`account ACC: its history archived up to v4 holds 1 bonuses (100 credits) by its archived totals and daily sums, but its boundary lists 0 (0 credits)`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer restore()
			s.exec(t, r.Replace(c.sql))
			want := r.Replace(c.want)
			for _, o := range []audit.Options{{}, {AccountID: s.account}} {
				if c.wholeOnly && o.AccountID != "" {
					continue
				}
				if d := s.audit(t, o); !strings.Contains(d, want) {
					t.Errorf("audit %q: differences\n%s\nwant one with %q", o.AccountID, d, want)
				}
			}
		})
	}
	// Lists taken out of a boundary archived since migration 0021 are a difference; archived
	// before it (every archive dated so), a boundary may lack them.
	s.exec(t, r.Replace(strings.Replace(onAccount, "EDIT", `b.account - 'payments' - 'bonuses'`, 1)))
	for _, o := range []audit.Options{{}, {AccountID: s.account}} {
		want := r.Replace("account ACC: archived boundary v4 lists no archived payments or no archived bonuses")
		if d := s.audit(t, o); !strings.Contains(d, want) {
			t.Errorf("audit %q of a boundary whose lists were taken out: differences\n%s\nwant one with %q", o.AccountID, d, want)
		}
	}
	pgtest.ExecAsOlderVersion(t, s.pool, `UPDATE event_archives SET archived_at = (SELECT applied_at - interval '1 day' FROM schema_migrations
		WHERE name = '0021_boundary_once_lists.sql')`)
	for _, o := range []audit.Options{{}, {AccountID: s.account}} {
		if d := s.audit(t, o); d != "" {
			t.Errorf("audit %q of a boundary archived before payments and bonuses were listed: differences\n%s", o.AccountID, d)
		}
	}
}
