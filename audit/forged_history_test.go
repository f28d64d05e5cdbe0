package audit_test

// Histories that are wrong in a money-relevant way, written as a bug in a command or an insider
// with INSERT on events (through the one append path, so every chain, version, head and
// balance_after is right) and UPDATE on the write model would write them: each keeps the write
// model and the read models in step with its events, so that only a rule of the contract is
// broken, and the audit must name it.

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// forge appends one event to the account's stream at the instant at, through eventstore.Append
// (hash-chained, head moved), with payload built from the balance before it, sets the account's
// balance to the payload's balance_after, and runs the extra write-model SQL ($1 = the account).
func forge(t *testing.T, pool *pgxpool.Pool, account string, at time.Time, typ string,
	payload func(balance int64) (any, int64), extra ...string) {
	t.Helper()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var no int32
		var balance int64
		if err := tx.QueryRow(ctx, `SELECT stream_no, balance FROM accounts WHERE account_id = $1 FOR UPDATE`, account).Scan(&no, &balance); err != nil {
			return err
		}
		heads, err := eventstore.HeadsByNo(ctx, tx, no)
		if err != nil {
			return err
		}
		p, after := payload(balance)
		if _, err := eventstore.Append(ctx, tx, heads[no], at, eventstore.NewEvent{Type: typ, Payload: p}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = $2 WHERE account_id = $1`, account, after); err != nil {
			return err
		}
		for _, sql := range extra {
			if _, err := tx.Exec(ctx, sql, account); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// forgeDetailCharge forges a place detail of place, paid with key 1 an hour after noon, taking
// credits (the write model's totals moved with it).
func forgeDetailCharge(t *testing.T, pool *pgxpool.Pool, account, place string, credits int64) {
	t.Helper()
	forge(t, pool, account, noon.Add(time.Hour), domain.EventRequestCharged, func(b int64) (any, int64) {
		return domain.RequestCharged{KeyNo: 1, Operation: domain.OpPlaceDetail, Paid: []string{domain.PlaceResource(place)},
			CreditsDelta: -credits, BalanceAfter: b - credits}, b - credits
	}, `UPDATE accounts SET charged_credits = charged_credits + `+itoa(credits)+`, requests_charged = requests_charged + 1 WHERE account_id = $1`)
}

// wantDifference runs a whole-store and an account audit and fails if either is clean.
func wantDifference(t *testing.T, pool *pgxpool.Pool, account, what string) {
	t.Helper()
	catchUp(t, pool)
	for _, o := range []audit.Options{{}, {AccountID: account}} {
		rep, out := run(t, pool, o)
		if len(rep.Differences) == 0 {
			t.Errorf("audit %q of a history with %s: 0 differences, want one naming it\n%s", o.AccountID, what, out)
		}
	}
}

// wantDifferenceNaming is wantDifference for a difference whose line holds needle.
func wantDifferenceNaming(t *testing.T, pool *pgxpool.Pool, account, needle, what string) {
	t.Helper()
	catchUp(t, pool)
	for _, o := range []audit.Options{{}, {AccountID: account}} {
		rep, out := run(t, pool, o)
		if !strings.Contains(strings.Join(rep.Differences, "\n"), needle) {
			t.Errorf("audit %q of a history with %s: no difference saying %q\n%s", o.AccountID, what, needle, out)
		}
	}
}

func cleanFirst(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("consistent database: %s", out)
	}
}

// decisions.md §8: "Credits bought: amount_cents * 2", and an amount outside 500..2500000 cents
// is refused. A CreditsPurchased whose credits are not twice its cents (or whose cents are out
// of bounds) mints credits no payment explains.
func TestAPurchaseWhoseCreditsAreNotTwiceItsCentsOrOutOfBoundsIsADifference(t *testing.T) {
	for _, c := range []struct {
		name           string
		cents, credits int64
	}{
		{"$5 paid, 1,000,000 credits", 500, 1_000_000},
		{"1 cent paid, 2 credits (below the $5 minimum)", 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := pgtest.NewPool(t)
			w := newWorld(t, pool, 2)
			cleanFirst(t, pool)
			ref := "forged-" + w.account
			forge(t, pool, w.account, noon.Add(time.Hour), domain.EventCreditsPurchased, func(b int64) (any, int64) {
				return domain.CreditsPurchased{AccountID: w.account, PaymentRef: ref, AmountCents: c.cents, Credits: c.credits,
					Ledger: domain.Ledger{CreditsDelta: c.credits, BalanceAfter: b + c.credits}}, b + c.credits
			},
				`UPDATE accounts SET purchased_credits = purchased_credits + `+itoa(c.credits)+` WHERE account_id = $1`,
				`INSERT INTO purchases (payment_ref, account_id, amount_cents, credits_added, balance_after, recorded_at)
				 SELECT '`+ref+`', $1, `+itoa(c.cents)+`, `+itoa(c.credits)+`, balance, now() FROM accounts WHERE account_id = $1`)
			wantDifference(t, pool, w.account, c.name)
		})
	}
}

// api-spec.md, Endpoints: place detail costs 1 credit. A charge of 500 credits for one place
// detail (balance arithmetic right) takes credits the price list does not.
func TestAChargeAboveTheOperationsPriceIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	cleanFirst(t, pool)
	forgeDetailCharge(t, pool, w.account, "fresh", 500)
	wantDifference(t, pool, w.account, "a 1-credit place detail charged 500 credits")
}

// decisions.md §4: "the old key keeps working for 24 hours (grace), then is revoked". A rotation
// recorded with a grace of 30 days (api_keys kept in step), and the old key then charged by the
// real meter two days after the rotation.
func TestARotationWithAGraceLongerThan24HoursIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	cleanFirst(t, pool)
	oldKey := keyOf(t, w, 1)
	rotatedAt := noon.Add(time.Hour)
	grace := rotatedAt.Add(30 * 24 * time.Hour)
	forge(t, pool, w.account, rotatedAt, domain.EventKeyIssued, func(b int64) (any, int64) {
		return domain.KeyIssued{AccountID: w.account, KeyID: "key_forged2", KeyNo: 2, KeyHash: strings.Repeat("ab", 32), Last4: "abcd",
			RotatedKeyID: oldKey, GraceUntil: &grace, Ledger: domain.Ledger{BalanceAfter: b}}, b
	},
		`UPDATE api_keys SET state = 'grace', grace_until = '`+grace.Format(time.RFC3339Nano)+`' WHERE account_id = $1 AND key_no = 1`,
		`INSERT INTO api_keys (key_id, key_no, key_hash, account_id, last4, state, issued_at)
		 VALUES ('key_forged2', 2, decode('`+strings.Repeat("ab", 32)+`', 'hex'), $1, 'abcd', 'active', '`+rotatedAt.Format(time.RFC3339Nano)+`')`)
	// (on the current code an audit here, before any late charge, is clean as well)
	chargeAt(t, w, rotatedAt.Add(48*time.Hour), 1)
	wantDifference(t, pool, w.account, "a key charged 48 h after its rotation (grace recorded as 30 days)")
}

// docs/operations.md, Auditor's guide: a digest covers every event at or below its position, "a
// later store where any of them is missing, changed, or joined by a back-dated one no longer
// matches it"; archived history is the one exception, and its boundary hash is vouched for by
// "the archive file's own SHA-256 and kyapi restore". Here no archive exists: an insider deletes
// an account's first three events (covered by a digest) and writes a stream_boundaries row for
// them by hand (its last event copied, its state folded so every sum adds up). No event_archives
// range holds that position, so no file can ever be restored; the audit and the digest should
// say so, not verify clean.
func TestABoundaryInNoArchivedRangeIsADifferenceToTheAuditAndTheDigest(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2) // v1 AccountOpened, v2 KeyIssued, v3 CreditsPurchased (1000), v4, v5 charges; all at noon
	cleanFirst(t, pool)
	key := newKey(t)
	d := takeDigest(t, pool, key)
	if rep, out := verify(t, pool, d); len(rep.Differences) != 0 {
		t.Fatalf("fresh digest: %s", out)
	}
	day := domain.Day(noon)
	state := `{"balance":1000,"purchased_credits":1000,"bonus_credits":0,"charged_credits":0,"requests_charged":0,"requests_deduplicated":0,
		"days":[{"day":"` + day + `","kind":"","count":0,"rows_paid":0,"rows_deduplicated":0,"credits":0,"cents":0,"version":3,"balance_after":1000},
		{"day":"` + day + `","kind":"purchase","count":1,"rows_paid":0,"rows_deduplicated":0,"credits":1000,"cents":500,"version":0,"balance_after":0}],
		"payments":[{"version":3,"payment_ref":"pay-` + w.account + `","credits":1000,"cents":500,"balance_after":1000}],"bonuses":[]}`
	tamper(t, pool, `WITH s AS (SELECT stream_no FROM streams WHERE stream_id = 'account-' || $1),
		prev AS (SELECT e.hash FROM events e, s WHERE e.stream_no = s.stream_no AND e.version = 2),
		last AS (SELECT e.* FROM events e, s WHERE e.stream_no = s.stream_no AND e.version = 3)
		INSERT INTO stream_boundaries (stream_no, version, position, hash, recorded_at, first_at, account, prev_hash, type, payload, metadata)
		SELECT last.stream_no, 3, last.position, last.hash, last.recorded_at, last.recorded_at, $2::jsonb, prev.hash, last.type, last.payload::text, last.metadata::text
		FROM last, prev`, w.account, state)
	tamper(t, pool, `DELETE FROM events WHERE stream_no = (SELECT stream_no FROM streams WHERE stream_id = 'account-' || $1) AND version <= 3`, w.account)
	var archives int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM event_archives`).Scan(&archives); err != nil || archives != 0 {
		t.Fatalf("event_archives: %d rows, %v", archives, err)
	}
	catchUp(t, pool)
	rep, out := run(t, pool, audit.Options{})
	drep, dout := verify(t, pool, d)
	if !strings.Contains(strings.Join(rep.Differences, "\n"), "lies in no archived range") ||
		!strings.Contains(strings.Join(drep.Differences, "\n"), "lies in no archived range") {
		t.Errorf("three events the digest covers were deleted, and the boundary standing for them lies in no archived range "+
			"(event_archives is empty): audit 0 differences (%q), digest verification 0 differences (%q)", strings.TrimSpace(out), dout)
	}
}

// docs/api.md: balance-at is "read from the event store, so it is exact at any instant". No
// hash covers stream_marks, and balance-at (and the statements' opening and closing balances)
// bound their search by them: one mark's recorded_at moved makes balance-at answer an older
// balance, and the audit names the mark.
func TestAnEditedStreamMarkIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 0)
	for i := range 300 { // v4 to v303, each 1 credit: a mark at v256
		w.charge(t, "q"+itoa(int64(i)))
	}
	cleanFirst(t, pool)
	views := commands.Views{Pool: pool}
	at := noon.Add(time.Hour)
	before, err := views.BalanceAt(ctx, w.account, at)
	if err != nil || before != 700 {
		t.Fatalf("balance-at before the edit: %d, %v; want 700", before, err)
	}
	tamper(t, pool, `UPDATE stream_marks SET recorded_at = '2100-01-01T00:00:00Z'
		WHERE version = 256 AND stream_no = (SELECT stream_no FROM accounts WHERE account_id = $1)`, w.account)
	after, err := views.BalanceAt(ctx, w.account, at)
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Fatalf("setup: balance-at %s still answers %d after the mark was edited", at.Format(time.RFC3339), after)
	}
	for _, o := range []audit.Options{{}, {AccountID: w.account}} {
		rep, out := run(t, pool, o)
		if !strings.Contains(strings.Join(rep.Differences, "\n"), "stream mark of v256") {
			t.Errorf("audit %q: balance-at %s answers %d (the store says %d), and the audit does not name the mark:\n%s",
				o.AccountID, at.Format(time.RFC3339), after, before, out)
		}
	}
}

// api-spec.md: "Repeat requests for the same resource within one UTC day are charged once";
// decisions.md §3: "a place paid once today is free ... for the rest of the day". newWorld paid
// place:p0 at noon; a second charge for it the same UTC day is a double charge.
func TestAResourcePaidTwiceTheSameUTCDayIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	cleanFirst(t, pool)
	forgeDetailCharge(t, pool, w.account, "p0", 1)
	wantDifferenceNaming(t, pool, w.account, "paid again on", "place:p0 paid twice on one UTC day")
}

// The converse: a RequestDeduplicated serving free a resource the account never paid that day
// (served without being paid: revenue the operator never collects).
func TestAResourceServedFreeThatWasNotPaidThatDayIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	cleanFirst(t, pool)
	forge(t, pool, w.account, noon.Add(time.Hour), domain.EventRequestDeduplicated, func(b int64) (any, int64) {
		return domain.RequestCharged{KeyNo: 1, Operation: domain.OpTowns, Deduplicated: []string{"towns"}, BalanceAfter: b}, b
	}, `UPDATE accounts SET requests_deduplicated = requests_deduplicated + 1 WHERE account_id = $1`)
	wantDifferenceNaming(t, pool, w.account, "served free (deduplicated)", "towns served free though never paid that day")
}

// decisions.md §4: "A second rotation while a key is in grace revokes that older grace key at
// once" (IssueKey appends a KeyRevoked for it). A second rotation recorded without it leaves the
// older key usable; the meter then charges it after the second rotation.
func TestASecondRotationThatLeavesTheOlderGraceKeyUsableIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	if _, err := w.accounts.IssueKey(ctx, w.account, eventstore.Metadata{}); err != nil { // key 1 in grace to noon+24h, key 2 active
		t.Fatal(err)
	}
	cleanFirst(t, pool)
	key2 := keyOf(t, w, 2)
	at := noon.Add(time.Hour)
	grace := at.Add(domain.GracePeriod)
	forge(t, pool, w.account, at, domain.EventKeyIssued, func(b int64) (any, int64) {
		return domain.KeyIssued{AccountID: w.account, KeyID: "key_forged3", KeyNo: 3, KeyHash: strings.Repeat("cd", 32), Last4: "wxyz",
			RotatedKeyID: key2, GraceUntil: &grace, Ledger: domain.Ledger{BalanceAfter: b}}, b
	},
		`UPDATE api_keys SET state = 'grace', grace_until = '`+grace.Format(time.RFC3339Nano)+`' WHERE account_id = $1 AND key_no = 2`,
		`INSERT INTO api_keys (key_id, key_no, key_hash, account_id, last4, state, issued_at)
		 VALUES ('key_forged3', 3, decode('`+strings.Repeat("cd", 32)+`', 'hex'), $1, 'wxyz', 'active', '`+at.Format(time.RFC3339Nano)+`')`)
	chargeAt(t, w, at.Add(time.Hour), 1) // key 1, which the second rotation should have revoked
	wantDifferenceNaming(t, pool, w.account, "is still in grace", "key 1 charged after a second rotation that did not revoke it")
}

// decisions.md §8: a bonus grant credits "every account with an active or grace key"; api-spec:
// "bonus credits are added to all active accounts". A BonusGranted to an account that never had
// a key (its grant's accounts count moved with it) credits an account the rule excludes.
func TestABonusToAnAccountWithNoUsableKeyIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	if _, err := w.accounts.GrantBonus(ctx, "outage-1", 100, "down", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	keyless, err := w.accounts.OpenAccount(ctx, "No Key Co", "nokey@test.example", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	cleanFirst(t, pool)
	forge(t, pool, keyless, noon.Add(time.Minute), domain.EventBonusGranted, func(b int64) (any, int64) {
		return domain.BonusGranted{AccountID: keyless, OutageID: "outage-1", Credits: 100, Reason: "down",
			Ledger: domain.Ledger{CreditsDelta: 100, BalanceAfter: b + 100}}, b + 100
	},
		`UPDATE accounts SET bonus_credits = bonus_credits + 100 WHERE account_id = $1`,
		`UPDATE bonus_grants SET accounts = accounts + 1 WHERE outage_id = 'outage-1' AND $1 <> ''`)
	wantDifferenceNaming(t, pool, keyless, "had no active or grace key", "a bonus credited to an account with no key")
}

// Only the first store's charges (the verbose form, carried over by migration 0005) say which
// day they were decided on. A charge in the compact form that says so anyway is a charge of
// the day it was recorded on: place:p0, paid at noon, paid again an hour later is paid twice,
// whatever day its payload names. (The meter reads it so too when it rebuilds a day's claims.)
func TestACompactChargeNamingADayOfItsOwnIsCheckedAsOfItsRecordedDay(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	cleanFirst(t, pool)
	yesterday := domain.Day(noon.AddDate(0, 0, -1))
	forge(t, pool, w.account, noon.Add(time.Hour), domain.EventRequestCharged, func(b int64) (any, int64) {
		return map[string]any{"k": 1, "op": domain.OpPlaceDetail, "paid": []string{domain.PlaceResource("p0")},
			"d": -1, "b": b - 1, "day": yesterday}, b - 1
	}, `UPDATE accounts SET charged_credits = charged_credits + 1, requests_charged = requests_charged + 1 WHERE account_id = $1`)
	wantDifferenceNaming(t, pool, w.account, "place:p0 paid again on 2026-11-23", "place:p0 paid twice on one UTC day (the second naming the day before)")
}

// The price list has never changed, and it is the only source of a charge's amount: a charge
// of an operation it does not have takes credits no price explains (here 500, for one row).
func TestAChargeOfAnOperationWithNoPriceIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2)
	cleanFirst(t, pool)
	forge(t, pool, w.account, noon.Add(time.Hour), domain.EventRequestCharged, func(b int64) (any, int64) {
		return map[string]any{"k": 1, "op": "places.premium", "paid": []string{"place:p-new"}, "d": -500, "b": b - 500}, b - 500
	}, `UPDATE accounts SET charged_credits = charged_credits + 500, requests_charged = requests_charged + 1 WHERE account_id = $1`)
	wantDifferenceNaming(t, pool, w.account, `"places.premium" takes 500 credits: the price list has no such operation`, "500 credits taken by an operation with no price")
}
