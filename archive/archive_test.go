package archive_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/adminapi"
	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

var ctx = context.Background()

// start is when the history of the tests begins; each charge moves the clock on by 5 minutes,
// so 1,200 charges span about four days.
var start = time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)

// history is a store with small partitions (1,000 positions) and two accounts with history.
type history struct {
	pool   *pgxpool.Pool
	clock  *atomic.Int64 // Unix microseconds
	meter  *commands.Meter
	views  commands.Views
	big    account
	small  account
	before archive.Options
}

type account struct {
	id     string
	caller commands.Caller
}

func (h *history) now() time.Time { return time.UnixMicro(h.clock.Load()).UTC() }

func newHistory(t *testing.T, bigCharges, smallCharges int) *history {
	t.Helper()
	pool := pgtest.NewPool(t)
	// The migrated store's partitions are empty: replace them with partitions of 1,000.
	exec(t, pool, `DO $$ DECLARE p record; BEGIN
		FOR p IN SELECT name FROM kyapi_event_partitions() LOOP EXECUTE format('DROP TABLE %I', p.name); END LOOP; END $$`)
	exec(t, pool, `UPDATE event_partitioning SET partition_size = 1000`)
	exec(t, pool, `SELECT kyapi_ensure_event_partitions()`)

	h := &history{pool: pool, clock: &atomic.Int64{}, views: commands.Views{Pool: pool}}
	h.clock.Store(start.UnixMicro())
	store := eventstore.New(pool)
	h.meter = commands.NewMeter(store, h.now, commands.MeterOptions{})
	t.Cleanup(h.meter.Close)
	accounts := commands.Accounts{Store: store, Clock: h.now}
	open := func(name string) account {
		id, err := accounts.OpenAccount(ctx, name, name+"@test.example", eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		key, err := accounts.IssueKey(ctx, id, eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := accounts.Purchase(ctx, id, 1000, "pay-"+id, eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
		caller, err := h.meter.Authenticate(ctx, domain.HashKey(key.APIKey))
		if err != nil {
			t.Fatal(err)
		}
		return account{id: id, caller: caller}
	}
	h.big, h.small = open("big"), open("small")
	for i := 0; i < max(bigCharges, smallCharges); i++ {
		if i < bigCharges {
			h.charge(t, h.big, i)
		}
		if i < smallCharges {
			h.charge(t, h.small, i)
		}
	}
	catchUp(t, pool)
	return h
}

// charge charges a place detail (one of 13, so most are deduplicated within a day) and moves the
// clock on.
func (h *history) charge(t *testing.T, a account, i int) {
	t.Helper()
	if _, err := h.meter.Charge(ctx, commands.ChargeRequest{Caller: a.caller, Operation: domain.OpPlaceDetail,
		Resources: []string{domain.PlaceResource(fmt.Sprint("p", i%13))}}); err != nil {
		t.Fatal(err)
	}
	h.clock.Add((5 * time.Minute).Microseconds())
}

// options archive below position `before`, three days after the history's last event.
func (h *history) options(t *testing.T, before int64) archive.Options {
	var names []string
	for _, a := range projections.SQLAppliers(time.Now) {
		names = append(names, a.Name())
	}
	return archive.Options{Before: before, File: filepath.Join(t.TempDir(), "archive.jsonl.gz"), Now: h.now().AddDate(0, 0, 3), Projections: names}
}

func exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func catchUp(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	for _, a := range projections.SQLAppliers(time.Now) {
		p := projections.SQL{Pool: pool, Applier: a}
		for deadline := time.Now().Add(time.Minute); ; {
			if _, err := projections.CatchUp(ctx, pool, p, 1000, nil); err != nil {
				t.Fatal(err)
			}
			cp, _ := p.Checkpoint(ctx)
			head, _ := eventstore.GlobalHead(ctx, pool)
			if !cp.Less(head) || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond) // another transaction on the cluster holds back xmin
		}
	}
}

func auditClean(t *testing.T, pool *pgxpool.Pool, opts audit.Options) audit.Report {
	t.Helper()
	var out strings.Builder
	opts.Out = &out
	rep, err := audit.Run(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 {
		t.Fatalf("audit found differences:\n%s", out.String())
	}
	return rep
}

func wholeLedger(t *testing.T, h *history, id string, after int64) ([]commands.LedgerEntry, *commands.ArchivedLedger) {
	t.Helper()
	var all []commands.LedgerEntry
	var archived *commands.ArchivedLedger
	for first := true; ; first = false {
		page, err := h.views.LedgerPage(ctx, id, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if first {
			archived = page.Archived
		} else if page.Archived != nil {
			t.Fatalf("page after %d says it skipped archived facts", after)
		}
		if len(page.Entries) == 0 {
			return all, archived
		}
		all = append(all, page.Entries...)
		after = page.Entries[len(page.Entries)-1].Position
	}
}

func TestAnArchivedRangeAuditsFromItsBoundaryAndRestoredAuditsCleanFromZero(t *testing.T) {
	h := newHistory(t, 1200, 300)
	total := count(t, h.pool, `SELECT count(*) FROM events`)
	marks := count(t, h.pool, `SELECT count(*) FROM stream_marks`)
	before := auditClean(t, h.pool, audit.Options{})
	accountBefore, err := h.views.Account(ctx, h.big.id, h.now())
	if err != nil {
		t.Fatal(err)
	}

	opts := h.options(t, 2000) // partitions [1, 1001) and [1001, 2001): the second holds the newest events
	res, err := archive.Archive(ctx, h.pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != 1 || res.To != 1001 || res.Events != 1000 || res.Streams != 2 {
		t.Fatalf("archived %+v; want positions 1 to 1000, 1000 events of 2 streams", res)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM events`); n != total-1000 {
		t.Fatalf("%d events left in the store of %d", n, total)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM kyapi_event_partitions() WHERE lower_bound = 1`); n != 0 {
		t.Fatal("the archived partition is still attached")
	}
	if n := count(t, h.pool, `SELECT count(*) FROM stream_marks WHERE position < 1001`); n != 0 {
		t.Fatalf("%d stream marks of archived events kept", n)
	}
	sum := sha256OfContent(t, opts.File)
	if sum != res.SHA256 {
		t.Fatalf("the file's content hashes to %x, the archive says %x", sum, res.SHA256)
	}

	rep := auditClean(t, h.pool, audit.Options{})
	if rep.ArchivedBefore != 1001 || rep.ArchivedEvents != 1000 || rep.Events != before.Events-1000 || rep.Accounts != 2 {
		t.Fatalf("audit after archiving: %+v (before: %+v)", rep, before)
	}
	auditClean(t, h.pool, audit.Options{SegmentEvents: 256, Workers: 2})
	auditClean(t, h.pool, audit.Options{AccountID: h.big.id})
	auditClean(t, h.pool, audit.Options{FromPosition: 500})

	// Totals still match: the account view reads the row, the audit folded them from the
	// boundary state and the events after it.
	accountAfter, err := h.views.Account(ctx, h.big.id, h.now())
	if err != nil {
		t.Fatal(err)
	}
	if accountAfter.Totals != accountBefore.Totals || accountAfter.Balance != accountBefore.Balance {
		t.Fatalf("account after archiving %+v, before %+v", accountAfter, accountBefore)
	}

	// New charges chain on to the archived history.
	for i := 0; i < 30; i++ {
		h.charge(t, h.big, 1000+i)
	}
	catchUp(t, h.pool)
	auditClean(t, h.pool, audit.Options{})

	// A projection starting over would miss the archived events: its reads say so.
	if _, _, err := eventstore.NextBatch(ctx, h.pool, eventstore.Position{}, 100); !errors.Is(err, eventstore.ErrArchived) {
		t.Fatalf("reading all streams from 0 with history archived: %v", err)
	}

	restored, err := archive.Restore(ctx, h.pool, opts.File)
	if err != nil {
		t.Fatal(err)
	}
	if restored.Events != 1000 || restored.From != 1 || restored.To != 1001 {
		t.Fatalf("restored %+v", restored)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM events`); n != total+30 {
		t.Fatalf("%d events after restoring, want %d", n, total+30)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM stream_marks`); n < marks {
		t.Fatalf("%d stream marks after restoring, %d before archiving", n, marks)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM stream_boundaries`); n != 0 {
		t.Fatalf("%d stream boundaries left after restoring everything", n)
	}
	// The partition put back has the streams' estimate of every partition (migration 0022).
	if n := count(t, h.pool, `SELECT count(*) FROM kyapi_event_partitions() p
		WHERE NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = format('%I', p.name)::regclass
			AND a.attname = 'stream_no' AND 'n_distinct=-0.01' = ANY(a.attoptions))`); n != 0 {
		t.Fatalf("%d partitions without the streams' estimate after restoring", n)
	}
	rep = auditClean(t, h.pool, audit.Options{})
	if rep.ArchivedBefore != 0 || rep.Events != before.Events+30 {
		t.Fatalf("audit after restoring: %+v", rep)
	}
	if _, _, err := eventstore.NextBatch(ctx, h.pool, eventstore.Position{}, 100); err != nil {
		t.Fatalf("reading all streams from 0 after restoring: %v", err)
	}

	// Restoring twice is refused and changes nothing.
	if _, err := archive.Restore(ctx, h.pool, opts.File); !errors.Is(err, archive.ErrRefused) || !strings.Contains(err.Error(), "restored already") {
		t.Fatalf("restoring twice: %v", err)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM events`); n != total+30 {
		t.Fatalf("%d events after a refused restore, want %d", n, total+30)
	}
}

// Archives extend the archived history one range at a time and are restored newest first.
func TestTwoArchivesStackAndAreRestoredNewestFirst(t *testing.T) {
	h := newHistory(t, 2300, 0)
	first, second := h.options(t, 1001), h.options(t, 2001)
	if _, err := archive.Archive(ctx, h.pool, first); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Archive(ctx, h.pool, second); err != nil {
		t.Fatal(err)
	}
	rep := auditClean(t, h.pool, audit.Options{})
	if rep.ArchivedBefore != 2001 || rep.ArchivedEvents != 2000 {
		t.Fatalf("audit with two archives: %+v", rep)
	}
	if _, err := archive.Restore(ctx, h.pool, first.File); !errors.Is(err, archive.ErrRefused) || !strings.Contains(err.Error(), "first") {
		t.Fatalf("restoring the older archive first: %v", err)
	}
	for _, f := range []string{second.File, first.File} {
		if _, err := archive.Restore(ctx, h.pool, f); err != nil {
			t.Fatal(err)
		}
		auditClean(t, h.pool, audit.Options{})
	}
}

func TestArchiveRefusesWhatItMustNotArchiveAndChangesNothing(t *testing.T) {
	h := newHistory(t, 1200, 0)
	cases := []struct {
		name    string
		prepare func(o *archive.Options)
		want    string
	}{
		{"a projection has not passed the range", func(o *archive.Options) {
			exec(t, h.pool, `UPDATE projection_checkpoints SET transaction_id = '0', position = 0 WHERE name = 'balances'`)
		}, "balances"},
		{"a projection has never run", func(o *archive.Options) {
			o.Projections = append(o.Projections, "statements")
		}, "statements (never run)"},
		{"the range holds the newest partition", func(o *archive.Options) { o.Before = 2001 }, "newest partition"},
		{"no partition lies wholly below the position", func(o *archive.Options) { o.Before = 999 }, "no partition lies wholly below"},
		{"the dedup claims still refer to the range", func(o *archive.Options) { o.Now = h.now() }, "dedup claims"},
		{"the file exists", func(o *archive.Options) {
			if err := os.WriteFile(o.File, []byte("an earlier archive"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "never overwritten"},
	}
	events := count(t, h.pool, `SELECT count(*) FROM events`)
	var cpTx string
	var cpPos int64
	if err := h.pool.QueryRow(ctx, `SELECT transaction_id::text, position FROM projection_checkpoints WHERE name = 'balances'`).Scan(&cpTx, &cpPos); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := h.options(t, 1001)
			c.prepare(&opts)
			_, err := archive.Archive(ctx, h.pool, opts)
			if !errors.Is(err, archive.ErrRefused) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v; want a refusal saying %q", err, c.want)
			}
			if n := count(t, h.pool, `SELECT count(*) FROM events`); n != events {
				t.Fatalf("%d events after a refusal, %d before", n, events)
			}
			if n := count(t, h.pool, `SELECT count(*) FROM event_archives`) + count(t, h.pool, `SELECT count(*) FROM stream_boundaries`); n != 0 {
				t.Fatal("a refused archive left archive records")
			}
			if b, err := os.ReadFile(opts.File); err == nil && string(b) != "an earlier archive" {
				t.Fatal("a refused archive left its file")
			}
			exec(t, h.pool, `UPDATE projection_checkpoints SET transaction_id = $1::text::xid8, position = $2 WHERE name = 'balances'`, cpTx, cpPos)
		})
	}
	// A chain broken inside the range is refused too: an archive only holds what audits clean.
	// (The events table refuses UPDATE; an insider gets round that by skipping triggers.)
	exec(t, h.pool, `BEGIN; SET LOCAL session_replication_role = replica;
		UPDATE events SET payload = replace(payload::text, ':', ': ')::json WHERE position = 500; COMMIT`)
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 1001)); !errors.Is(err, archive.ErrRefused) || !strings.Contains(err.Error(), "kyapi audit") {
		t.Fatalf("archiving an edited event: %v", err)
	}
}

func TestATamperedOrForeignArchiveFileIsRefused(t *testing.T) {
	h := newHistory(t, 1200, 0)
	opts := h.options(t, 1001)
	if _, err := archive.Archive(ctx, h.pool, opts); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, opts.File)
	var edited []string
	for _, l := range lines {
		if strings.Contains(l, `"version":40,`) && strings.HasPrefix(l, `{"event"`) {
			l = strings.Replace(l, `\"b\":`, `\"b\":1`, 1)
		}
		edited = append(edited, l)
	}
	cases := []struct {
		name  string
		lines []string
		want  string
	}{
		{"an event edited, the digest left", edited, "does not match its own digest"},
		{"an event edited and the digest recomputed", withDigest(edited), "is not the archive"},
		{"an event removed and the digest recomputed", withDigest(append(append([]string{}, lines[:30]...), lines[31:]...)), "summary does not count"},
		{"cut short", lines[:len(lines)/2], "truncated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "tampered.jsonl.gz")
			writeLines(t, file, c.lines)
			_, err := archive.Restore(ctx, h.pool, file)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v; want an error saying %q", err, c.want)
			}
			if n := count(t, h.pool, `SELECT count(*) FROM event_archives`); n != 1 {
				t.Fatal("a refused restore changed the archive records")
			}
		})
	}
	// The same content with a recomputed digest, but the recorded one altered: a file of
	// another database.
	exec(t, h.pool, `UPDATE event_archives SET sha256 = sha256('another'::bytea)`)
	if _, err := archive.Restore(ctx, h.pool, opts.File); !errors.Is(err, archive.ErrRefused) {
		t.Fatalf("a file whose digest the database does not know: %v", err)
	}
	exec(t, h.pool, `UPDATE event_archives SET sha256 = $1`, func() []byte { s := sha256OfContent(t, opts.File); return s[:] }())
	if _, err := archive.Restore(ctx, h.pool, opts.File); err != nil {
		t.Fatalf("the untouched file: %v", err)
	}
	auditClean(t, h.pool, audit.Options{})
}

func TestLedgerAndBalanceAtAcrossTheArchiveBoundary(t *testing.T) {
	h := newHistory(t, 1200, 300)
	ledger, skipped := wholeLedger(t, h, h.big.id, 0)
	if skipped != nil || int64(len(ledger)) != ledger[len(ledger)-1].Version {
		t.Fatalf("the ledger before archiving: %d entries, skipped %+v", len(ledger), skipped)
	}
	// Balances at instants all through the history (and before and after it), before archiving.
	var instants []time.Time
	for at := start.Add(-time.Hour); at.Before(h.now().Add(time.Hour)); at = at.Add(17 * time.Minute) {
		instants = append(instants, at)
	}
	for _, e := range ledger[:5] {
		instants = append(instants, e.RecordedAt, e.RecordedAt.Add(-time.Microsecond))
	}
	want := map[time.Time]int64{}
	for _, at := range instants {
		b, err := h.views.BalanceAt(ctx, h.big.id, at)
		if err != nil {
			t.Fatal(err)
		}
		want[at] = b
	}

	if _, err := archive.Archive(ctx, h.pool, h.options(t, 1001)); err != nil {
		t.Fatal(err)
	}
	hot, skipped := wholeLedger(t, h, h.big.id, 0)
	if skipped == nil {
		t.Fatal("a ledger read from 0 does not say that it skipped archived facts")
	}
	last := ledger[skipped.Facts-1] // the account's last archived fact
	if skipped.Position != last.Position || skipped.BalanceAfter != last.BalanceAfter || !skipped.RecordedAt.Equal(last.RecordedAt) {
		t.Fatalf("archived part %+v; its last fact was %+v", skipped, last)
	}
	if int64(len(hot)) != int64(len(ledger))-skipped.Facts || hot[0].Version != skipped.Facts+1 {
		t.Fatalf("%d hot entries from version %d; want the %d after version %d", len(hot), hot[0].Version, int64(len(ledger))-skipped.Facts, skipped.Facts)
	}
	for i, e := range hot {
		if w := ledger[skipped.Facts+int64(i)]; e.Position != w.Position || e.BalanceAfter != w.BalanceAfter || string(e.Payload) != string(w.Payload) {
			t.Fatalf("hot entry %d is %+v, was %+v", i, e, w)
		}
	}
	if _, again := wholeLedger(t, h, h.big.id, skipped.Position); again != nil {
		t.Fatal("a page starting at the boundary says it skipped archived facts")
	}

	var exact, archived int
	for _, at := range instants {
		got, err := h.views.BalanceAt(ctx, h.big.id, at)
		var ae *domain.ArchivedError
		switch {
		case !at.Before(skipped.RecordedAt) || at.Before(ledger[0].RecordedAt):
			if err != nil || got != want[at] {
				t.Fatalf("balance at %s: %d, %v; want %d (exact)", at, got, err, want[at])
			}
			exact++
		case errors.As(err, &ae):
			if e := httpx.MapError(err); e.Status != http.StatusGone || e.Code != "archived" || !strings.Contains(e.Message, "archived") {
				t.Fatalf("an archived instant maps to %+v", e)
			}
			archived++
		default:
			t.Fatalf("balance at %s inside the archived range: %d, %v; want an ArchivedError", at, got, err)
		}
	}
	if exact < 100 || archived < 50 {
		t.Fatalf("%d instants answered exactly, %d archived: the test does not cover both sides", exact, archived)
	}
}

// sha256OfContent is the SHA-256 of the file's uncompressed content before its digest line.
func sha256OfContent(t *testing.T, file string) [32]byte {
	lines := readLines(t, file)
	h := sha256.New()
	for _, l := range lines[:len(lines)-1] {
		h.Write([]byte(l + "\n"))
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func readLines(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(gz)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// withDigest replaces the digest line with one computed over the other lines.
func withDigest(lines []string) []string {
	body := lines[:len(lines)-1]
	h := sha256.New()
	for _, l := range body {
		h.Write([]byte(l + "\n"))
	}
	return append(append([]string{}, body...), `{"sha256":"`+hex.EncodeToString(h.Sum(nil))+`"}`)
}

func writeLines(t *testing.T, file string, lines []string) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	for _, l := range lines {
		gz.Write([]byte(l + "\n"))
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A statement sums the store's facts in its window: once part of an account's history is
// archived, a window holding any archived fact is refused (410 archived, naming both times),
// and every other window still answers exactly what it answered before.
func TestAStatementWindowHoldingArchivedFactsIsRefusedAndTheOthersStayExact(t *testing.T) {
	h := newHistory(t, 1200, 300)
	day := func(t time.Time) time.Time { return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC) }
	first, last := day(start).AddDate(0, 0, -1), day(h.now()).AddDate(0, 0, 2)
	type window struct{ from, to time.Time }
	var windows []window
	for from := first; from.Before(last); from = from.AddDate(0, 0, 1) {
		for to := from; !to.After(last); to = to.AddDate(0, 0, 1) {
			windows = append(windows, window{from, to})
		}
	}
	want := map[window]commands.Statement{}
	for _, w := range windows {
		st, err := h.views.Statement(ctx, h.big.id, w.from, w.to)
		if err != nil {
			t.Fatal(err)
		}
		want[w] = st
	}

	if _, err := archive.Archive(ctx, h.pool, h.options(t, 1001)); err != nil {
		t.Fatal(err)
	}
	ledger, skipped := wholeLedger(t, h, h.big.id, 0)
	if skipped == nil || len(ledger) == 0 {
		t.Fatal("nothing of the account was archived")
	}
	var exact, refused int
	for _, w := range windows {
		st, err := h.views.Statement(ctx, h.big.id, w.from, w.to)
		holdsArchived := !w.from.After(skipped.RecordedAt) && w.to.After(start) // start: the first fact's time
		var ae *domain.ArchivedError
		switch {
		case holdsArchived:
			if !errors.As(err, &ae) || !ae.Until.Equal(w.to) || ae.Facts != skipped.Facts {
				t.Fatalf("statement %s to %s holds archived facts: %+v, %v; want an ArchivedError", w.from, w.to, st, err)
			}
			if e := httpx.MapError(err); e.Status != http.StatusGone || e.Code != "archived" ||
				!strings.Contains(e.Message, w.from.Format(time.RFC3339)) || !strings.Contains(e.Message, skipped.RecordedAt.Format(time.RFC3339Nano)) {
				t.Fatalf("an archived window maps to %+v", e)
			}
			refused++
		case err != nil:
			t.Fatalf("statement %s to %s: %v", w.from, w.to, err)
		default:
			if !reflect.DeepEqual(st, want[w]) {
				t.Fatalf("statement %s to %s after archiving %+v, before %+v", w.from, w.to, st, want[w])
			}
			if len(st.Charges) > 0 {
				exact++
			}
		}
	}
	if exact < 3 || refused < 3 {
		t.Fatalf("%d windows with charges answered exactly, %d refused: the test does not cover both sides", exact, refused)
	}
}

// The ledger's CSV export of an account with archived facts starts after them, as the JSON
// ledger does, and says so in its Ledger-Archived header; an export of unarchived history
// carries no such header.
func TestTheLedgerExportSaysItStartsAfterTheArchivedFacts(t *testing.T) {
	h := newHistory(t, 1200, 300)
	admin := (&adminapi.Server{Views: h.views, Token: "admin-token"}).Handler()
	export := func(query string) (http.Header, [][]string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/admin/accounts/"+h.big.id+"/ledger.csv"+query, nil)
		req.Header.Set("Authorization", "Bearer admin-token")
		rec := httptest.NewRecorder()
		admin.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("ledger.csv%s: %d %s", query, rec.Code, rec.Body)
		}
		records, err := csv.NewReader(rec.Body).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		return rec.Header(), records[1:]
	}
	if header, rows := export(""); header.Get("Ledger-Archived") != "" || rows[0][1] != "1" {
		t.Fatalf("before archiving: header %q, first row %v", header.Get("Ledger-Archived"), rows[0])
	}

	if _, err := archive.Archive(ctx, h.pool, h.options(t, 1001)); err != nil {
		t.Fatal(err)
	}
	hot, skipped := wholeLedger(t, h, h.big.id, 0)
	header, rows := export("")
	want := fmt.Sprintf("facts=%d; through_position=%d; through_recorded_at=%s; balance_after=%d",
		skipped.Facts, skipped.Position, skipped.RecordedAt.UTC().Format(time.RFC3339Nano), skipped.BalanceAfter)
	if got := header.Get("Ledger-Archived"); got != want {
		t.Fatalf("Ledger-Archived %q, want %q", got, want)
	}
	if len(rows) != len(hot) || rows[0][1] != fmt.Sprint(skipped.Facts+1) || rows[0][0] != fmt.Sprint(hot[0].Position) {
		t.Fatalf("%d rows from %v; the JSON ledger has %d from version %d", len(rows), rows[0], len(hot), hot[0].Version)
	}
	if header, _ := export("?after=" + fmt.Sprint(skipped.Position)); header.Get("Ledger-Archived") != "" {
		t.Fatalf("an export starting at the boundary says it skipped archived facts: %q", header.Get("Ledger-Archived"))
	}
}

// The usage audit does not compare the days the archive may hold part of: up to the day of the
// newest archived event. Times do not follow positions across streams (a process whose clock
// is ahead records an account's events at that time), so an archived event can be of a later
// day than the first event kept; cut at the oldest kept, a consistent store audited dirty.
func TestTheUsageAuditSkipsEveryDayTheArchiveHoldsPartOf(t *testing.T) {
	h := newHistory(t, 0, 0)
	// A process whose clock is five days ahead charges the small account once, early in the
	// store (position < 1001).
	h.clock.Store(start.AddDate(0, 0, 5).UnixMicro())
	if _, err := h.meter.Charge(ctx, commands.ChargeRequest{Caller: h.small.caller, Operation: domain.OpPlaceDetail,
		Resources: []string{domain.PlaceResource("ahead")}}); err != nil {
		t.Fatal(err)
	}
	h.clock.Store(start.UnixMicro())
	for i := 0; i < 1100; i++ {
		h.charge(t, h.big, i)
	}
	catchUp(t, h.pool)
	auditClean(t, h.pool, audit.Options{})

	opts := h.options(t, 2000)
	opts.Now = start.AddDate(0, 0, 12)
	res, err := archive.Archive(ctx, h.pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.To != 1001 {
		t.Fatalf("archived %+v; want positions up to 1000", res)
	}
	var out strings.Builder
	rep, err := audit.Run(ctx, h.pool, audit.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 {
		t.Fatalf("a consistent store audits dirty after archiving (the oldest kept event is of %s):\n%s",
			oldestKept(t, h).Format(time.DateOnly), out.String())
	}
}

func oldestKept(t *testing.T, h *history) time.Time {
	var at time.Time
	if err := h.pool.QueryRow(ctx, `SELECT recorded_at FROM events ORDER BY position LIMIT 1`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at.UTC()
}
