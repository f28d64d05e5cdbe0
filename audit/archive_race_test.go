package audit_test

// Reads that take events and stream boundaries in one snapshot, racing `kyapi archive`. An
// archive drops partitions, which no snapshot versions: a read whose snapshot was taken before
// the archive committed, and which reaches the events after it, must not find the archived
// events gone without the boundary that replaces them (eventstore.ReadSnapshot).

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/adminapi"
	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
)

// pause holds the first statement containing match, after skip such statements, on any
// connection of its pool, until release is closed; reached is closed when it gets there.
type pause struct {
	match   string
	skip    atomic.Int64
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func (p *pause) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, p.match) && p.skip.Add(-1) < 0 {
		p.once.Do(func() { close(p.reached); <-p.release })
	}
	return ctx
}

func (p *pause) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// pausedPool is a pool on s's database whose first statement containing match waits (pause).
func (s *archivedStore) pausedPool(t *testing.T, match string) (*pgxpool.Pool, *pause) {
	t.Helper()
	cfg := s.pool.Config().Copy()
	p := &pause{match: match, reached: make(chan struct{}), release: make(chan struct{})}
	cfg.ConnConfig.Tracer = p
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, p
}

// archiveBeside starts archiving the first partition and returns once the archive has either
// finished or is waiting for a lock (held by a read in its snapshot); its
// outcome comes on the channel.
func (s *archivedStore) archiveBeside(t *testing.T) <-chan error {
	t.Helper()
	s.catchUp(t)
	parts, err := eventstore.Partitions(ctx, s.pool)
	if err != nil || len(parts) == 0 {
		t.Fatalf("partitions %v: %v", parts, err)
	}
	opts := s.archiveOptions(t, parts[0])
	// Long enough never to end a wait the archive should win; short enough that an archive and
	// a read waiting for each other fail the test instead of hanging it.
	opts.LockWait = time.Minute
	done := make(chan error, 1)
	go func() {
		_, err := archive.Archive(ctx, s.pool, opts)
		done <- err
	}()
	for {
		select {
		case err := <-done:
			done <- err
			return done
		default:
		}
		var waiting bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'LOCK TABLE % IN ACCESS EXCLUSIVE MODE%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return done
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReadsRacingAnArchiveSeeItWholeOrNotAtAll(t *testing.T) {
	for _, c := range []struct {
		name  string
		match string // the statement of the read at which it is held while the archive runs
		read  func(s *archivedStore, pool *pgxpool.Pool) (wrong string, err error)
	}{
		{"balance-at, held at its search of the stream", "stream_marks m WHERE", func(s *archivedStore, pool *pgxpool.Pool) (string, error) {
			at := archivedStart.Add(30 * time.Minute)
			b, err := commands.Views{Pool: pool}.BalanceAt(ctx, s.account, at)
			if err != nil {
				return "", err
			}
			if b != 1000 {
				return "balance-at the account's first hour: " + itoa(b) + ", want 1000 (the account held 1,000 credits then)", nil
			}
			return "", nil
		}},
		{"a ledger page, held at its read of the stream", "e.position > $2", func(s *archivedStore, pool *pgxpool.Pool) (string, error) {
			page, err := commands.Views{Pool: pool}.LedgerPage(ctx, s.account, 0, 100)
			if err != nil {
				return "", err
			}
			var first, skipped int64 = 0, 0
			if len(page.Entries) > 0 {
				first = page.Entries[0].Version
			}
			if page.Archived != nil {
				skipped = page.Archived.Facts
			}
			if first != skipped+1 || len(page.Entries) == 0 {
				return "the first page starts at version " + itoa(first) + " after " + itoa(skipped) + " archived facts: facts are missing", nil
			}
			return "", nil
		}},
		{"an audit, held as a worker takes its snapshot", "SET TRANSACTION SNAPSHOT", func(s *archivedStore, pool *pgxpool.Pool) (string, error) {
			var out strings.Builder
			rep, err := audit.Run(ctx, pool, audit.Options{Out: &out})
			if err != nil {
				return "", err
			}
			if len(rep.Differences) > 0 {
				return "the audit of a consistent store reports: " + out.String(), nil
			}
			return "", nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newArchivedStore(t) // 1,000 credits at archivedStart
			s.fill(t, 1000)          // the account's facts so far are in the first partition
			s.at(archivedStart.Add(time.Hour))
			if _, err := s.accounts.Purchase(ctx, s.account, 500, "live-pay", eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
			s.catchUp(t)
			pool, p := s.pausedPool(t, c.match)
			type answer struct {
				wrong string
				err   error
			}
			got := make(chan answer, 1)
			go func() {
				wrong, err := c.read(s, pool)
				got <- answer{wrong, err}
			}()
			<-p.reached
			archived := s.archiveBeside(t)
			close(p.release)
			a := <-got
			if a.err != nil {
				t.Fatalf("the read beside the archive: %v", a.err)
			}
			if a.wrong != "" {
				t.Error(a.wrong)
			}
			if err := <-archived; err != nil {
				t.Fatalf("archive: %v", err)
			}
			// And once archived, the same read is right too.
			if wrong, err := c.read(s, s.pool); err != nil || wrong != "" {
				t.Errorf("after the archive: %s%v", wrong, err)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A ledger export reads a page at a time, each in a snapshot of its own. An archive that
// commits between two pages takes facts the export has not written yet: the export must then
// end as a broken transfer, never as a file that looks complete without them.
func TestALedgerExportThatAnArchiveOvertakesEndsBroken(t *testing.T) {
	s := newArchivedStore(t)
	// The account's facts fill the first two partitions (1,000 positions each) and go on in a
	// third: the export's first page (1,000 facts) ends inside the second.
	for i := range 2100 {
		if _, err := s.accounts.Purchase(ctx, s.account, 500, "bulk-"+strconv.Itoa(i), eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	s.catchUp(t)
	parts, err := eventstore.Partitions(ctx, s.pool)
	if err != nil || len(parts) < 3 {
		t.Fatalf("partitions %v: %v", parts, err)
	}
	pool, p := s.pausedPool(t, "LOCK TABLE archive_gate")
	p.skip.Store(1) // the first page's snapshot; the second waits before taking its own
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	srv := httptest.NewServer((&adminapi.Server{Views: commands.Views{Pool: pool}, Token: "admin-token", Log: logger, Clock: s.now}).Handler())
	defer srv.Close()
	type answer struct {
		body string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", srv.URL+"/admin/accounts/"+s.account+"/ledger.csv", nil)
		req.Header.Set("Authorization", "Bearer admin-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- answer{"", err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- answer{string(b), err}
	}()
	<-p.reached
	opts := s.archiveOptions(t, parts[1]) // every fact in the first two partitions
	if _, err := archive.Archive(ctx, s.pool, opts); err != nil {
		t.Fatalf("archive: %v", err)
	}
	close(p.release)
	a := <-got
	rows := strings.Count(a.body, "\n") - 1
	if a.err == nil && rows != 2103 {
		t.Errorf("the export ended as a complete file of %d facts; the account has 2,103 (an archive took some mid-way)", rows)
	}
	t.Logf("the export: %d rows, then %v", rows, a.err)
}
