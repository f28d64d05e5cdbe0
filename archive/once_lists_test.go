package archive_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// boundaryState is the account state of the account's archive boundary (ok false: none).
func boundaryState(t *testing.T, h *history, accountID string) (st archive.AccountState, ok bool) {
	t.Helper()
	var raw []byte
	err := h.pool.QueryRow(ctx, `SELECT b.account FROM stream_boundaries b JOIN streams s USING (stream_no) WHERE s.stream_id = $1`,
		domain.AccountStream(accountID)).Scan(&raw)
	if err != nil {
		return st, false
	}
	if st, err = archive.DecodeAccountState(raw); err != nil {
		t.Fatal(err)
	}
	return st, true
}

// fileEnds is the end state of every account stream of an archive file, by account.
func fileEnds(t *testing.T, file string) map[string]archive.AccountState {
	t.Helper()
	ends := map[string]archive.AccountState{}
	for _, l := range readLines(t, file) {
		var line struct {
			Stream *struct {
				StreamID string `json:"stream_id"`
				End      struct {
					Account *archive.AccountState `json:"account"`
				} `json:"end"`
			} `json:"stream"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		if line.Stream != nil && line.Stream.End.Account != nil {
			ends[domain.AccountOfStream(line.Stream.StreamID)] = *line.Stream.End.Account
		}
	}
	return ends
}

// An account's archived state lists its archived CreditsPurchased and BonusGranted facts
// (payments and bonuses: what the audit counts a payment once and a bonus once per outage by,
// docs/architecture.md, "A payment is counted once"). The lists are written to the archive
// file and the boundary, are carried on by the next archive from the boundary, are put back by
// kyapi restore with the boundary they started from, and are checked by restore like every
// other state field: a list edited in the database is refused. A file and boundary written
// before the lists were recorded restore as they were.
func TestArchivedPaymentsAndBonusesRoundTripThroughArchiveAndRestore(t *testing.T) {
	h := newHistory(t, 1200, 300) // each account's purchase at v3, in the first partition
	accounts := commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}
	if _, err := accounts.GrantBonus(ctx, "outage-rt", 50, "down", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	for i := range 600 { // the grant's facts in the second partition, appends in the third
		h.charge(t, h.big, 2000+i)
	}
	catchUp(t, h.pool)
	payments, bonuses := map[string][]archive.ArchivedPayment{}, map[string][]archive.ArchivedBonus{}
	for _, a := range []account{h.big, h.small} {
		var p archive.ArchivedPayment
		if err := h.pool.QueryRow(ctx, `SELECT payment_ref, credits_added, amount_cents, balance_after FROM purchases WHERE account_id = $1`, a.id).
			Scan(&p.PaymentRef, &p.Credits, &p.Cents, &p.BalanceAfter); err != nil {
			t.Fatal(err)
		}
		p.Version = 3
		payments[a.id] = []archive.ArchivedPayment{p}
		b := archive.ArchivedBonus{OutageID: "outage-rt", Credits: 50}
		if err := h.pool.QueryRow(ctx, `SELECT e.version FROM events e JOIN streams s USING (stream_no)
			WHERE s.stream_id = $1 AND e.type = 'BonusGranted'`, domain.AccountStream(a.id)).Scan(&b.Version); err != nil {
			t.Fatal(err)
		}
		bonuses[a.id] = []archive.ArchivedBonus{b}
	}
	if n := count(t, h.pool, `SELECT count(*) FROM events WHERE type = 'BonusGranted' AND position BETWEEN 1001 AND 2000`); n != 2 {
		t.Fatalf("setup: %d BonusGranted facts in the second partition, want 2", n)
	}
	check := func(what string, got archive.AccountState, id string, wantBonuses []archive.ArchivedBonus) {
		t.Helper()
		if !reflect.DeepEqual(got.Payments, payments[id]) || !reflect.DeepEqual(got.Bonuses, wantBonuses) {
			t.Errorf("%s of account %s: payments %+v, bonuses %+v; want %+v, %+v", what, id, got.Payments, got.Bonuses, payments[id], wantBonuses)
		}
	}
	none := []archive.ArchivedBonus{}

	first, second := h.options(t, 1001), h.options(t, 2001)
	if _, err := archive.Archive(ctx, h.pool, first); err != nil {
		t.Fatal(err)
	}
	ends := fileEnds(t, first.File)
	for _, a := range []account{h.big, h.small} {
		st, _ := boundaryState(t, h, a.id)
		check("the first boundary", st, a.id, none)
		check("the first file's end state", ends[a.id], a.id, none)
	}
	if _, err := archive.Archive(ctx, h.pool, second); err != nil {
		t.Fatal(err)
	}
	ends = fileEnds(t, second.File)
	for _, a := range []account{h.big, h.small} {
		st, _ := boundaryState(t, h, a.id)
		check("the second boundary", st, a.id, bonuses[a.id])
		check("the second file's end state", ends[a.id], a.id, bonuses[a.id])
	}
	auditClean(t, h.pool, audit.Options{})

	// A list edited in the database is refused by restore, as any other state field is.
	saved, _ := boundaryState(t, h, h.big.id)
	exec(t, h.pool, `UPDATE stream_boundaries b SET account = jsonb_set(b.account, '{payments,0,payment_ref}', '"pay-forged"')
		FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, domain.AccountStream(h.big.id))
	// (The refusal reaches the caller through the COPY that loads the events, as text.)
	if _, err := archive.Restore(ctx, h.pool, second.File); err == nil || !strings.Contains(err.Error(), "refused: stream "+domain.AccountStream(h.big.id)) ||
		!strings.Contains(err.Error(), `"payment_ref":"pay-forged"`) {
		t.Fatalf("restoring over a boundary whose payments were edited: %v; want a refusal naming the edited list", err)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM event_archives`); n != 2 {
		t.Fatalf("a refused restore left %d archives of 2", n)
	}
	raw, err := json.Marshal(saved)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, h.pool, `UPDATE stream_boundaries b SET account = $2 FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`,
		domain.AccountStream(h.big.id), string(raw))

	// Restored newest first: the boundaries go back to the first archive's end, lists and all.
	if _, err := archive.Restore(ctx, h.pool, second.File); err != nil {
		t.Fatal(err)
	}
	for _, a := range []account{h.big, h.small} {
		st, _ := boundaryState(t, h, a.id)
		check("the boundary restored to the first archive's end", st, a.id, none)
	}
	auditClean(t, h.pool, audit.Options{})
	if _, err := archive.Restore(ctx, h.pool, first.File); err != nil {
		t.Fatal(err)
	}
	auditClean(t, h.pool, audit.Options{})

	// An archive written before the lists were recorded: neither its file nor its boundaries
	// hold them. It audits clean (with the older checks); the next archive folds on from its
	// boundaries without lists (they would list only part of the facts); both restore.
	old := h.options(t, 1001)
	if _, err := archive.Archive(ctx, h.pool, old); err != nil {
		t.Fatal(err)
	}
	stripListsFromFile(t, h, old.File)
	exec(t, h.pool, `UPDATE stream_boundaries SET account = account - 'payments' - 'bonuses' WHERE account IS NOT NULL`)
	if st, _ := boundaryState(t, h, h.big.id); st.Payments != nil || st.Bonuses != nil {
		t.Fatalf("setup: a boundary of before the lists lists %+v, %+v", st.Payments, st.Bonuses)
	}
	// Taken out of boundaries whose history was all archived since migration 0021, the lists
	// are missed: the audit says so, and no archive folds on from such a boundary.
	want := "account " + h.big.id + ": archived boundary v"
	if d := auditDiffs(t, h, audit.Options{}); !strings.Contains(d, want) || !strings.Contains(d, "lists no archived payments or no archived bonuses") {
		t.Errorf("audit of boundaries whose lists were taken out: differences\n%s\nwant one for %s", d, h.big.id)
	}
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2001)); err == nil || !strings.Contains(err.Error(), "lists no archived payments") {
		t.Fatalf("archiving on from boundaries whose lists were taken out: %v; want a refusal naming the lists", err)
	}
	archivedBeforeLists(t, h.pool)
	auditClean(t, h.pool, audit.Options{})
	next := h.options(t, 2001)
	if _, err := archive.Archive(ctx, h.pool, next); err != nil {
		t.Fatal(err)
	}
	ends = fileEnds(t, next.File)
	for _, a := range []account{h.big, h.small} {
		if st, _ := boundaryState(t, h, a.id); st.Payments != nil || st.Bonuses != nil || ends[a.id].Payments != nil || ends[a.id].Bonuses != nil {
			t.Errorf("account %s archived on from a boundary without lists: its boundary lists %+v, %+v, its file %+v, %+v; want none",
				a.id, st.Payments, st.Bonuses, ends[a.id].Payments, ends[a.id].Bonuses)
		}
	}
	auditClean(t, h.pool, audit.Options{})
	if _, err := archive.Restore(ctx, h.pool, next.File); err != nil {
		t.Fatalf("restoring an archive folded on from boundaries without lists: %v", err)
	}
	if _, err := archive.Restore(ctx, h.pool, old.File); err != nil {
		t.Fatalf("restoring an archive written before the lists: %v", err)
	}
	if _, ok := boundaryState(t, h, h.big.id); ok {
		t.Fatal("a boundary is left after restoring every archive")
	}
	auditClean(t, h.pool, audit.Options{})
}

// archivedBeforeLists dates every archive before migration 0021, as an archive run before the
// boundaries listed payments and bonuses left them: their boundaries may then lack the lists.
func archivedBeforeLists(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	pgtest.ExecAsOlderVersion(t, pool, `UPDATE event_archives SET archived_at = (SELECT applied_at - interval '1 day' FROM schema_migrations
		WHERE name = '0021_boundary_once_lists.sql')`)
}
