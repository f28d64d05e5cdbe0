package audit_test

// archivedStore: a store with small partitions (1,000 positions), one account and a clock the
// test moves, that can archive its first partition (as archive_test's history does), for the
// tests of what the audit checks across an archive boundary.

import (
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

// archivedStart is when an archivedStore's history begins.
var archivedStart = time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)

type archivedStore struct {
	pool     *pgxpool.Pool
	clock    *atomic.Int64 // Unix microseconds
	accounts commands.Accounts
	account  string
	key1     string         // the API key issued first (no. 1)
	key1ID   string         // its id
	hash1    domain.KeyHash // its hash
}

func (s *archivedStore) now() time.Time { return time.UnixMicro(s.clock.Load()).UTC() }

func (s *archivedStore) at(t time.Time) { s.clock.Store(t.UnixMicro()) }

// newArchivedStore makes the store: partitions of 1,000 positions, an account opened at archivedStart with
// its first key and 1,000 credits (500 cents).
func newArchivedStore(t *testing.T) *archivedStore {
	t.Helper()
	pool := pgtest.NewPool(t)
	for _, sql := range []string{`DO $$ DECLARE p record; BEGIN
		FOR p IN SELECT name FROM kyapi_event_partitions() LOOP EXECUTE format('DROP TABLE %I', p.name); END LOOP; END $$`,
		`UPDATE event_partitioning SET partition_size = 1000`, `SELECT kyapi_ensure_event_partitions()`} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	s := &archivedStore{pool: pool, clock: &atomic.Int64{}}
	s.at(archivedStart)
	s.accounts = commands.Accounts{Store: eventstore.New(pool), Clock: s.now}
	var err error
	if s.account, err = s.accounts.OpenAccount(ctx, "Review Co", "review@test.example", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	k, err := s.accounts.IssueKey(ctx, s.account, eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	s.key1, s.key1ID, s.hash1 = k.APIKey, k.KeyID, domain.HashKey(k.APIKey)
	if _, err := s.accounts.Purchase(ctx, s.account, 500, "pay-"+s.account, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// fill appends n events to a stream of no account at the clock's time, so that the account's
// events so far lie in the first partition and the next ones in another.
func (s *archivedStore) fill(t *testing.T, n int) {
	t.Helper()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		heads, err := eventstore.OpenHeads(ctx, tx, true, "place-rk-filler")
		if err != nil {
			return err
		}
		var b eventstore.Batch
		for range n {
			if _, err := b.Add(heads["place-rk-filler"], s.now(), eventstore.NewEvent{Type: "Note", Payload: map[string]int{"n": 1}}); err != nil {
				return err
			}
		}
		return eventstore.Write(ctx, tx, &b)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// charge charges one place detail with the key whose hash is given, by a meter of its own at
// the clock's time (so the key is read afresh from api_keys). edit, when set, changes the
// authenticated caller first: a charge the meter writes as told, as one written behind its
// back would be.
func (s *archivedStore) charge(t *testing.T, hash domain.KeyHash, place string, edit func(*commands.Caller)) {
	t.Helper()
	meter := commands.NewMeter(eventstore.New(s.pool), s.now, commands.MeterOptions{})
	defer meter.Close()
	caller, err := meter.Authenticate(ctx, hash)
	if err != nil {
		t.Fatalf("setup: authenticate at %s: %v", s.now().Format(time.RFC3339Nano), err)
	}
	if edit != nil {
		edit(&caller)
	}
	if _, err := meter.Charge(ctx, commands.ChargeRequest{Caller: caller, Operation: domain.OpPlaceDetail,
		Resources: []string{domain.PlaceResource(place)}}); err != nil {
		t.Fatalf("setup: charge at %s: %v", s.now().Format(time.RFC3339Nano), err)
	}
}

func (s *archivedStore) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// catchUp brings the shared read models up to the store head.
func (s *archivedStore) catchUp(t *testing.T) {
	t.Helper()
	catchUp(t, s.pool)
}

// archiveFirstPartition archives the store's first partition (the account's events up to the
// fill, and part of the fill), as kyapi archive does, a month after the history began.
func (s *archivedStore) archiveFirstPartition(t *testing.T) {
	t.Helper()
	s.catchUp(t)
	parts, err := eventstore.Partitions(ctx, s.pool)
	if err != nil || len(parts) == 0 {
		t.Fatalf("partitions %v: %v", parts, err)
	}
	if _, err := archive.Archive(ctx, s.pool, s.archiveOptions(t, parts[0])); err != nil {
		t.Fatalf("archive: %v", err)
	}
	var b int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM stream_boundaries b JOIN streams st USING (stream_no) WHERE st.stream_id = $1`,
		domain.AccountStream(s.account)).Scan(&b); err != nil || b != 1 {
		t.Fatalf("setup: the account has %d archived boundaries (%v), want 1", b, err)
	}
}

// archiveOptions archive the events before the end of partition p, a month after archivedStart.
func (s *archivedStore) archiveOptions(t *testing.T, p eventstore.Partition) archive.Options {
	var names []string
	for _, a := range projections.SQLAppliers(time.Now) {
		names = append(names, a.Name())
	}
	return archive.Options{Before: p.To, File: filepath.Join(t.TempDir(), "archive.jsonl.gz"),
		Now: archivedStart.AddDate(0, 1, 0), Projections: names}
}

// audit returns what an audit reports, one difference a line ("" for none).
func (s *archivedStore) audit(t *testing.T, o audit.Options) string {
	t.Helper()
	var out strings.Builder
	o.Out = &out
	rep, err := audit.Run(ctx, s.pool, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) == 0 {
		return ""
	}
	return out.String()
}

// keyIDOf is the id of the account's key numbered no.
func (s *archivedStore) keyIDOf(t *testing.T, no int) string {
	t.Helper()
	var id string
	if err := s.pool.QueryRow(ctx, `SELECT key_id FROM api_keys WHERE account_id = $1 AND key_no = $2`, s.account, no).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
