package archive_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// upgradedStore: the first partition archived before migration 0021 (its boundaries without
// lists, its row dated before the migration), then an account opened after the upgrade, whose
// whole history lies in the second partition, archived after it (its boundary lists).
func upgradedStore(t *testing.T) (*history, string) {
	h := newHistory(t, 1200, 300)
	accounts := commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}
	first := h.options(t, 1001)
	if _, err := archive.Archive(ctx, h.pool, first); err != nil {
		t.Fatal(err)
	}
	// As a pre-0021 kyapi archive left it: neither its file nor its boundaries list.
	stripListsFromFile(t, h, first.File)
	exec(t, h.pool, `UPDATE stream_boundaries SET account = account - 'payments' - 'bonuses' WHERE account IS NOT NULL`)
	// Archived then (before migration 0021 was applied), before the late account was opened.
	pgtest.ExecAsOlderVersion(t, h.pool, `UPDATE event_archives SET archived_at = $1`, h.now())
	h.clock.Add(time.Hour.Microseconds())
	late, err := accounts.OpenAccount(ctx, "late", "late@test.example", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := accounts.Purchase(ctx, late, 1000, "pay-"+late, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		h.charge(t, h.big, 5000+i)
	}
	catchUp(t, h.pool)
	if n := count(t, h.pool, `SELECT count(*) FROM events e JOIN streams s USING (stream_no)
		WHERE s.stream_id = $1 AND (e.position < 1001 OR e.position >= 2001)`, domain.AccountStream(late)); n != 0 {
		t.Fatalf("setup: %d of the late account's events outside the second partition", n)
	}
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2001)); err != nil {
		t.Fatal(err)
	}
	if st, _ := boundaryState(t, h, late); st.Payments == nil || len(st.Payments) != 1 {
		t.Fatalf("setup: the late account's boundary lists %+v", st.Payments)
	}
	auditClean(t, h.pool, audit.Options{})
	return h, late
}

// An account opened after the upgrade has no history archived before migration 0021, yet its
// lists can be taken out of its boundary unseen while any older archive remains, and its
// archived payment credited again.
func TestListsTakenFromTheBoundaryOfAnAccountOpenedAfterTheUpgradeAreADifference(t *testing.T) {
	h, late := upgradedStore(t)
	stream, ref := domain.AccountStream(late), "pay-"+late
	exec(t, h.pool, `UPDATE stream_boundaries b SET account = b.account - 'payments' - 'bonuses'
		FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, stream)
	exec(t, h.pool, `UPDATE purchases SET payment_ref = payment_ref || '-old' WHERE payment_ref = $1`, ref)
	res, err := (commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}).Purchase(ctx, late, 1000, ref, eventstore.Metadata{})
	if err != nil || res.Replayed {
		t.Fatalf("setup: the same payment_ref again: %+v, %v", res, err)
	}
	catchUp(t, h.pool)
	for _, o := range []audit.Options{{}, {AccountID: late}} {
		if d := auditDiffs(t, h, o); !strings.Contains(d, "account "+late+": archived boundary v") {
			t.Errorf("audit %q: lists taken out of the boundary of an account whose whole history was archived after migration 0021, "+
				"and its archived payment %q credited again: differences\n%s\nwant the lists named as taken out", o.AccountID, ref, d)
		}
	}
}

// The control: on a store upgraded with an older archive left, archiving, restoring and
// archiving again with nothing tampered audits clean at every step.
func TestAnUpgradedStoreArchivesRestoresAndArchivesAgainClean(t *testing.T) {
	h, _ := upgradedStore(t)
	archives, err := eventstore.Archives(ctx, h.pool)
	if err != nil || len(archives) != 2 {
		t.Fatalf("archives %v %v", archives, err)
	}
	if _, err := archive.Restore(ctx, h.pool, archives[1].FileName); err != nil {
		t.Fatal(err)
	}
	auditClean(t, h.pool, audit.Options{})
	for i := range 1100 {
		h.charge(t, h.small, 9000+i)
	}
	catchUp(t, h.pool)
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 3001)); err != nil {
		t.Fatal(err)
	}
	auditClean(t, h.pool, audit.Options{})
	archives, _ = eventstore.Archives(ctx, h.pool)
	if _, err := archive.Restore(ctx, h.pool, archives[1].FileName); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Restore(ctx, h.pool, archives[0].FileName); err != nil {
		t.Fatal(err)
	}
	auditClean(t, h.pool, audit.Options{})
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2001)); err != nil {
		t.Fatal(err)
	}
	auditClean(t, h.pool, audit.Options{})
}

// stripListsFromFile rewrites an archive file as a kyapi before migration 0021 wrote it (no
// payments and bonuses in any state) and records its new digest.
func stripListsFromFile(t *testing.T, h *history, file string) {
	t.Helper()
	var lines []string
	for _, l := range readLines(t, file) {
		if strings.HasPrefix(l, `{"stream"`) {
			var line map[string]map[string]any
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"start", "end"} {
				if b, _ := line["stream"][k].(map[string]any); b != nil {
					if st, _ := b["account"].(map[string]any); st != nil {
						delete(st, "payments")
						delete(st, "bonuses")
					}
				}
			}
			b, err := json.Marshal(line)
			if err != nil {
				t.Fatal(err)
			}
			l = string(b)
		}
		lines = append(lines, l)
	}
	writeLines(t, file+".tmp", withDigest(lines))
	sum := sha256OfContent(t, file+".tmp")
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	exec(t, h.pool, `UPDATE event_archives SET sha256 = $1 WHERE file_name LIKE '%' || $2`, sum[:], filepath.Base(filepath.Dir(file))+"/"+filepath.Base(file))
}
