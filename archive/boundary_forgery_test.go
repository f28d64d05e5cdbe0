package archive_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// archivedDormant archives the history of newHistory(1200, 300) below position 2,000: the
// small account's history is then archived entirely, and its balance is only in its boundary
// state and the account rows. It returns a digest taken after the archive.
func archivedDormant(t *testing.T) (*history, audit.Digest) {
	t.Helper()
	h := newHistory(t, 1200, 300)
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2000)); err != nil {
		t.Fatal(err)
	}
	stream := domain.AccountStream(h.small.id)
	if n := count(t, h.pool, `SELECT count(*) FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = $1`, stream); n != 0 {
		t.Fatalf("the small account still has %d events in the store; the test needs its history archived", n)
	}
	auditClean(t, h.pool, audit.Options{})
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d, err := audit.TakeDigest(ctx, h.pool, key, h.now())
	if err != nil {
		t.Fatal(err)
	}
	return h, d
}

// mint raises an account's balance by n credits where an insider with plain UPDATEs reaches
// it once its history is archived: the boundary state, the account row and rm_balances.
func mint(t *testing.T, h *history, accountID string, n int64) {
	t.Helper()
	exec(t, h.pool, `UPDATE stream_boundaries b SET account = jsonb_set(b.account, '{balance}', to_jsonb((b.account->>'balance')::bigint + $2))
		FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, domain.AccountStream(accountID), n)
	exec(t, h.pool, `UPDATE accounts SET balance = balance + $2 WHERE account_id = $1`, accountID, n)
	exec(t, h.pool, `UPDATE rm_balances SET balance = balance + $2 WHERE account_id = $1`, accountID, n)
}

// verifyDiffs is what verifying the digest reports, one difference a line.
func verifyDiffs(t *testing.T, h *history, d audit.Digest) string {
	t.Helper()
	rep, err := audit.VerifyDigest(ctx, h.pool, d, 2)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(rep.Differences, "\n")
}

// An account whose history is archived entirely has its balance in its boundary state, where
// plain UPDATEs reach it (no append-only trigger to get round). The boundary records its last
// archived event, which the chain vouches for, and the balance after it must be the state's
// (docs/operations.md, "Retention and archiving"): credits minted at the boundary, and spent
// on, are a difference for the audit and for a digest's verification, naming the account.
func TestAForgedArchivedBalanceIsFoundByTheAudit(t *testing.T) {
	h, digest := archivedDormant(t)
	mint(t, h, h.small.id, 100000)
	// The forged credits can be spent: the next fact chains on from the forged balance.
	if _, err := (commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}).Purchase(ctx, h.small.id, 500, "after-forgery", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	catchUp(t, h.pool)

	boundary := "account " + h.small.id + ": archived boundary"
	for _, o := range []audit.Options{{}, {AccountID: h.small.id}, {SegmentEvents: 1, Workers: 2}} {
		if d := auditDiffs(t, h, o); !strings.Contains(d, boundary) {
			t.Errorf("audit %+v of a balance forged at the boundary: differences\n%s\nwant one starting %q", o, d, boundary)
		}
	}
	if d := verifyDiffs(t, h, digest); !strings.Contains(d, boundary) {
		t.Errorf("digest verification of a balance forged at the boundary: differences\n%s\nwant one starting %q", d, boundary)
	}
}

// The boundary's recorded last event is checked against the boundary's chain hash: editing it
// to agree with a forged balance is a difference; forging the hash with it breaks the chain to
// what a digest holds.
func TestAnArchivedBoundaryWhoseRecordedEventWasEditedIsFound(t *testing.T) {
	const minted = 100000
	// forgeLastEvent rewrites the small account's boundary event so that its balance_after is
	// the minted balance, and returns the hash that content would have.
	forgeLastEvent := func(t *testing.T, h *history) [32]byte {
		t.Helper()
		stream := domain.AccountStream(h.small.id)
		b, ok, err := eventstore.BoundaryOf(ctx, h.pool, stream)
		if err != nil || !ok || b.Last == nil {
			t.Fatalf("the small account's boundary: %+v, %v, %v; want one recording its last event", b, ok, err)
		}
		var payload map[string]any
		if err := json.Unmarshal(b.Last.Payload, &payload); err != nil {
			t.Fatal(err)
		}
		key := "balance_after"
		if _, compact := payload["b"]; compact {
			key = "b"
		}
		payload[key] = payload[key].(float64) + minted
		forged, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, h.pool, `UPDATE stream_boundaries b SET payload = $2 FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`,
			stream, string(forged))
		return eventstore.EventHash(b.Last.PrevHash, stream, b.Version, b.Last.Type, forged, b.Last.Metadata, b.At)
	}

	t.Run("its payload", func(t *testing.T) {
		h, digest := archivedDormant(t)
		mint(t, h, h.small.id, minted)
		forgeLastEvent(t, h)
		want := "stream " + domain.AccountStream(h.small.id) + ": archived boundary"
		if d := auditDiffs(t, h, audit.Options{}); !strings.Contains(d, want) || !strings.Contains(d, "does not match its hash") {
			t.Errorf("audit: differences\n%s\nwant the boundary's content not matching its hash", d)
		}
		if d := verifyDiffs(t, h, digest); !strings.Contains(d, want) || !strings.Contains(d, "does not match its hash") {
			t.Errorf("digest: differences\n%s\nwant the boundary's content not matching its hash", d)
		}
	})
	t.Run("its payload and hash, and the stream's head", func(t *testing.T) {
		h, digest := archivedDormant(t)
		mint(t, h, h.small.id, minted)
		hash := forgeLastEvent(t, h)
		stream := domain.AccountStream(h.small.id)
		exec(t, h.pool, `UPDATE stream_boundaries b SET hash = $2 FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, stream, hash[:])
		exec(t, h.pool, `UPDATE streams SET head_hash = $2 WHERE stream_id = $1`, stream, hash[:])
		// Consistent in itself, as a stream re-chained whole is: the digest is what holds the hash.
		t.Logf("audit: %q", auditDiffs(t, h, audit.Options{}))
		if d := verifyDiffs(t, h, digest); !strings.Contains(d, "stream "+stream+": re-chained") {
			t.Errorf("digest: differences\n%s\nwant the stream re-chained", d)
		}
	})
}

// kyapi archive folds each stream on from its boundary: it refuses one that its recorded last
// event does not vouch for, rather than fold forged credits into a new boundary whose last
// event (chained on from the forged balance) would agree with them.
func TestArchiveRefusesToFoldOnFromAForgedBoundary(t *testing.T) {
	h, _ := archivedDormant(t)
	mint(t, h, h.small.id, 100000)
	if _, err := (commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}).Purchase(ctx, h.small.id, 500, "after-forgery", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	// Enough history after the purchase that its partition is no longer the newest.
	for i := range 600 {
		h.charge(t, h.big, 2000+i)
	}
	catchUp(t, h.pool)
	opts := h.options(t, 2001)
	archives := count(t, h.pool, `SELECT count(*) FROM event_archives`)
	_, err := archive.Archive(ctx, h.pool, opts)
	if !errors.Is(err, archive.ErrRefused) || !strings.Contains(err.Error(), "account "+h.small.id+": archived boundary") {
		t.Fatalf("archiving on from a forged boundary: %v; want a refusal naming the account's boundary", err)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM event_archives`); n != archives {
		t.Errorf("%d archives after a refusal, %d before", n, archives)
	}
	if _, err := os.Stat(opts.File); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused archive left its file: %v", err)
	}
}

// An account whose history is archived entirely keeps its totals (purchased, bonus, charged
// credits, request counts) and its daily sums only in its boundary state and in the rows the
// audit compares that state with (accounts, rm_balances, rm_account_days), where plain UPDATEs
// reach them. The chain vouches for the balance at the boundary, and what the archived facts
// add up to must agree with it: purchased + bonus - charged is the balance, the daily sums add
// up to the totals kind by kind, and the newest archived day closes with that balance. Totals
// and daily sums edited against that are a difference for the audit (whole, of the account,
// in segments) and for a digest's verification.
func TestArchivedTotalsAndDailySumsThatDoNotAddUpToTheVouchedBalanceAreADifference(t *testing.T) {
	h, digest := archivedDormant(t)
	stream := domain.AccountStream(h.small.id)

	var before struct{ purchased, charged, balance int64 }
	if err := h.pool.QueryRow(ctx, `SELECT purchased_credits, charged_credits, balance FROM accounts WHERE account_id = $1`, h.small.id).
		Scan(&before.purchased, &before.charged, &before.balance); err != nil {
		t.Fatal(err)
	}

	// 1. Totals: 100,000 purchased credits that were never bought, and 50,000 charged credits
	// that were never charged (the balance, which the chain vouches for, is left alone).
	exec(t, h.pool, `UPDATE stream_boundaries b SET account = b.account
			|| jsonb_build_object('purchased_credits', (b.account->>'purchased_credits')::bigint + 100000,
			                      'charged_credits', (b.account->>'charged_credits')::bigint + 50000)
		FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, stream)
	for _, table := range []string{"accounts", "rm_balances"} {
		exec(t, h.pool, `UPDATE `+table+` SET purchased_credits = purchased_credits + 100000, charged_credits = charged_credits + 50000
			WHERE account_id = $1`, h.small.id)
	}
	// 2. Daily sums: one archived day of place-detail charges spent 50,000 credits more.
	exec(t, h.pool, `UPDATE stream_boundaries b SET account = jsonb_set(b.account, '{days}', (
			SELECT jsonb_agg(CASE WHEN d->>'day' = $2 AND d->>'kind' = $3
				THEN d || jsonb_build_object('credits', (d->>'credits')::bigint + 50000) ELSE d END ORDER BY o)
			FROM jsonb_array_elements(b.account->'days') WITH ORDINALITY AS x(d, o)))
		FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, stream, domain.Day(start), string(domain.OpPlaceDetail))
	exec(t, h.pool, `UPDATE rm_account_days SET credits = credits + 50000 WHERE account_id = $1 AND day = $2::date AND kind = $3`,
		h.small.id, domain.Day(start), string(domain.OpPlaceDetail))

	if n := count(t, h.pool, `SELECT count(*) FROM rm_account_days WHERE account_id = $1 AND day = $2::date AND kind = $3 AND credits >= 50000`,
		h.small.id, domain.Day(start), string(domain.OpPlaceDetail)); n != 1 {
		t.Fatalf("setup: %d daily rows edited, want 1", n)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM stream_boundaries b JOIN streams s USING (stream_no), jsonb_array_elements(b.account->'days') d
		WHERE s.stream_id = $1 AND (d->>'credits')::bigint >= 50000`, stream); n != 1 {
		t.Fatalf("setup: %d archived daily sums edited, want 1", n)
	}
	var after struct{ purchased, charged, balance int64 }
	if err := h.pool.QueryRow(ctx, `SELECT purchased_credits, charged_credits, balance FROM accounts WHERE account_id = $1`, h.small.id).
		Scan(&after.purchased, &after.charged, &after.balance); err != nil {
		t.Fatal(err)
	}
	if after.balance != before.balance || after.purchased != before.purchased+100000 {
		t.Fatalf("setup: account row %+v, before %+v", after, before)
	}
	t.Logf("account %s now shows purchased %d (was %d), charged %d (was %d), balance %d: purchased - charged = %d",
		h.small.id, after.purchased, before.purchased, after.charged, before.charged, after.balance, after.purchased-after.charged)

	prefix := "account " + h.small.id + ": archived boundary v"
	wants := []string{
		fmt.Sprintf("its totals say purchased %d + bonus 0 - charged %d = %d credits, but its last archived event vouches for a balance of %d",
			after.purchased, after.charged, after.purchased-after.charged, after.balance),
		fmt.Sprintf("its daily sums add up to %d purchased credits, its totals say %d", before.purchased, after.purchased),
	}
	check := func(what, d string) {
		for _, w := range wants {
			if !strings.Contains(d, prefix) || !strings.Contains(d, w) {
				t.Errorf("%s: differences\n%s\nwant %q ... %q", what, d, prefix, w)
			}
		}
	}
	for _, o := range []audit.Options{{}, {AccountID: h.small.id}, {SegmentEvents: 1, Workers: 2}} {
		check(fmt.Sprintf("audit %+v", o), auditDiffs(t, h, o))
	}
	check("digest verification", verifyDiffs(t, h, digest))
}

// A payment whose fact is archived has only its purchases row in the store to be counted once
// by, and its account's boundary state, which lists its archived payments: a row deleted so
// that the same payment_ref is credited again is a payment credited twice, once archived. A
// boundary archived before the payments were listed falls back to matching the account's rows
// without a fact in the store with the purchases its archived daily sums count (number,
// credits, cents): the archived purchase is then without its row (docs/operations.md,
// "Retention and archiving").
func TestAnArchivedPaymentCreditedAgainIsADifference(t *testing.T) {
	for _, listed := range []bool{true, false} {
		t.Run(map[bool]string{true: "listed", false: "archived before payments were listed"}[listed], func(t *testing.T) {
			h, _ := archivedDormant(t)
			stream := domain.AccountStream(h.small.id)
			if !listed {
				exec(t, h.pool, `UPDATE stream_boundaries b SET account = b.account - 'payments' - 'bonuses'
					FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, stream)
				archivedBeforeLists(t, h.pool)
				auditClean(t, h.pool, audit.Options{})
			}
			ref := "pay-" + h.small.id
			exec(t, h.pool, `DELETE FROM purchases WHERE payment_ref = $1`, ref)
			res, err := (commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}).Purchase(ctx, h.small.id, 1000, ref, eventstore.Metadata{})
			if err != nil || res.Replayed {
				t.Fatalf("setup: the same payment_ref again: %+v, %v", res, err)
			}
			catchUp(t, h.pool)
			want := []string{`payment "` + ref + `": credited 2 times (` + stream + ` v3 (archived), ` + stream + ` v`}
			if !listed {
				want = []string{"account " + h.small.id + ": its history archived up to v",
					"holds 1 purchases (2000 credits, 1000 cents), but 0 purchases rows"}
			}
			for _, o := range []audit.Options{{}, {AccountID: h.small.id}} {
				d := auditDiffs(t, h, o)
				for _, w := range want {
					if !strings.Contains(d, w) {
						t.Errorf("audit %q of an archived payment credited again: differences\n%s\nwant %q", o.AccountID, d, w)
					}
				}
			}
		})
	}
}

// The boundary state holds no keys: a key issued in archived history is known to the audit by
// the number its api_keys row gives it and by the key facts after the boundary. Revoked after
// the boundary, set active again in api_keys and charged, it is a difference all the same.
func TestAKeyIssuedBeforeTheBoundaryIsCheckedAgainstItsRevocationAfterIt(t *testing.T) {
	h, _ := archivedDormant(t)
	var keyID string
	if err := h.pool.QueryRow(ctx, `SELECT key_id FROM api_keys WHERE account_id = $1`, h.small.id).Scan(&keyID); err != nil {
		t.Fatal(err)
	}
	if err := (commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}).RevokeKey(ctx, h.small.id, keyID, "compromised", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	catchUp(t, h.pool)
	auditClean(t, h.pool, audit.Options{})
	auditClean(t, h.pool, audit.Options{AccountID: h.small.id})

	exec(t, h.pool, `UPDATE api_keys SET state = 'active', revoked_at = NULL WHERE key_id = $1`, keyID)
	meter := commands.NewMeter(eventstore.New(h.pool), h.now, commands.MeterOptions{})
	defer meter.Close()
	caller, err := meter.Authenticate(ctx, h.small.caller.KeyHash)
	if err != nil {
		t.Fatalf("setup: the reactivated key: %v", err)
	}
	if _, err := meter.Charge(ctx, commands.ChargeRequest{Caller: caller, Operation: domain.OpPlaceDetail,
		Resources: []string{domain.PlaceResource("after-revoke")}}); err != nil {
		t.Fatalf("setup: charge with the reactivated key: %v", err)
	}
	catchUp(t, h.pool)
	charged := "account " + h.small.id + ": key " + keyID + " (no. 1) was revoked at v304"
	row := "account " + h.small.id + ": api_keys row of key " + keyID + " (no. 1) is active, its facts say revoked"
	for _, o := range []audit.Options{{}, {AccountID: h.small.id}} {
		if d := auditDiffs(t, h, o); !strings.Contains(d, charged) || !strings.Contains(d, row) {
			t.Errorf("audit %q: differences\n%s\nwant %q and %q", o.AccountID, d, charged, row)
		}
	}
}

// A boundary in a range archived before migration 0020 may lack its last event and is then
// trusted as recorded. An insider who mints credits at a boundary (its balance, totals and daily
// sums moved together, and the rows after them) and takes its last event away could once make it
// pass by dating its archive row before that migration (or the migration after it): both times
// are fixed now (migration 0026), and the audit names the boundary.
func TestAnArchiveRowCannotBeBackdatedToPassAForgedBoundary(t *testing.T) {
	const minted = 10
	h, _ := archivedDormant(t)
	stream := domain.AccountStream(h.small.id)
	b, ok, err := eventstore.BoundaryOf(ctx, h.pool, stream)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	st, err := archive.DecodeAccountState(b.Account)
	if err != nil {
		t.Fatal(err)
	}
	// Mint: balance up, charged credits down by as much, on one metered day and on the
	// newest day's closing row, so that every archived sum still adds up.
	st.Balance += minted
	st.ChargedCredits -= minted
	var meteredDay, meteredKind, closingDay string
	for i := range st.Days {
		d := &st.Days[i]
		if d.Kind == "" && d.Day >= closingDay {
			closingDay = d.Day
		}
		if meteredKind == "" && d.Kind != "" && d.Kind != "purchase" && d.Kind != "bonus" && d.Credits >= minted {
			d.Credits -= minted
			meteredDay, meteredKind = d.Day, d.Kind
		}
	}
	for i := range st.Days {
		if d := &st.Days[i]; d.Kind == "" && d.Day == closingDay {
			d.BalanceAfter += minted
		}
	}
	if meteredKind == "" {
		t.Fatalf("no metered day with %d credits in %+v", minted, st.Days)
	}
	forged, _ := json.Marshal(st)
	exec(t, h.pool, `UPDATE stream_boundaries b SET account = $2::jsonb FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, stream, string(forged))
	exec(t, h.pool, `UPDATE accounts SET balance = balance + $2, charged_credits = charged_credits - $2 WHERE account_id = $1`, h.small.id, minted)
	exec(t, h.pool, `UPDATE rm_balances SET balance = balance + $2, charged_credits = charged_credits - $2 WHERE account_id = $1`, h.small.id, minted)
	exec(t, h.pool, `UPDATE rm_account_days SET credits = credits - $2 WHERE account_id = $1 AND day = $3::date AND kind = $4`, h.small.id, minted, meteredDay, meteredKind)
	exec(t, h.pool, `UPDATE rm_account_days SET balance_after = balance_after + $2 WHERE account_id = $1 AND day = $3::date AND kind = ''`, h.small.id, minted, closingDay)

	// Control: with the recorded event still there, the forgery is found.
	if d := auditDiffs(t, h, audit.Options{}); !strings.Contains(d, "archived boundary") {
		t.Fatalf("control: audit of the minted boundary: %q; want the boundary named", d)
	}
	// The insider drops the recorded event and back-dates the archive row before migration 0020.
	exec(t, h.pool, `UPDATE stream_boundaries b SET prev_hash = NULL, type = NULL, payload = NULL, metadata = NULL
		FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, stream)
	// What made that boundary pass as one archived before migration 0020 (which may lack its
	// last event): its archive row dated before the migration, or the migration after it.
	for _, sql := range []string{
		`UPDATE event_archives SET archived_at = (SELECT applied_at - interval '1 second' FROM schema_migrations
			WHERE name = '0020_boundary_last_event.sql')`,
		`UPDATE schema_migrations SET applied_at = now() + interval '1 day' WHERE name = '0020_boundary_last_event.sql'`,
		`DELETE FROM schema_migrations WHERE name = '0020_boundary_last_event.sql'`,
	} {
		if _, err := h.pool.Exec(ctx, sql); err == nil {
			t.Errorf("accepted: %s", sql)
		}
	}
	// Nor does an archive row taken out and put back keep the time it is given.
	exec(t, h.pool, `CREATE TEMP TABLE a AS SELECT * FROM event_archives; DELETE FROM event_archives;
		UPDATE a SET archived_at = '2020-01-01'; INSERT INTO event_archives SELECT * FROM a`)
	var legacy bool
	if err := h.pool.QueryRow(ctx, `SELECT bool_or(archived_at < '2021-01-01') FROM event_archives`).Scan(&legacy); err != nil || legacy {
		t.Errorf("an archive row re-inserted with an old archived_at keeps it (%v)", err)
	}
	if d := auditDiffs(t, h, audit.Options{}); !strings.Contains(d, "archived boundary") {
		t.Errorf("%d credits minted at an archived boundary whose last event was taken away: the audit reports %q", minted, d)
	}
}
