package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrArchived means a reader of all streams asked for events after a position that archived
// events come after: it would miss them. The archived range must be restored first (kyapi
// restore; docs/operations.md, "Retention and archiving").
var ErrArchived = errors.New("eventstore: events after this position are archived")

// Partition is one partition of the events table: positions From up to, not including, To.
type Partition struct {
	Name     string
	From, To int64
}

// Partitions returns the attached partitions of the events table in position order.
func Partitions(ctx context.Context, q Querier) ([]Partition, error) {
	rows, err := q.Query(ctx, `SELECT name, lower_bound, upper_bound FROM kyapi_event_partitions()`)
	if err != nil {
		return nil, err
	}
	var out []Partition
	var p Partition
	_, err = pgx.ForEachRow(rows, []any{&p.Name, &p.From, &p.To}, func() error { out = append(out, p); return nil })
	return out, err
}

// NextPosition is the position the next appended event will take.
func NextPosition(ctx context.Context, q Querier) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM event_position_seq`).Scan(&n)
	return n, err
}

// Archive is a range of positions whose partitions were detached, written to a file and
// dropped.
type Archive struct {
	From, To int64 // positions From up to, not including, To
	Events   int64
	// Last is the newest event of the range in global order; nil for a range without events.
	Last       *Position
	SHA256     [32]byte // of the archive file's content
	FileName   string
	ArchivedAt time.Time
}

// Archives returns the archived ranges in position order: together they cover the positions
// from the first partition up to the last one's To.
func Archives(ctx context.Context, q Querier) ([]Archive, error) {
	rows, err := q.Query(ctx, `SELECT from_position, to_position, events, last_tx::text, last_position, sha256, file_name, archived_at
		FROM event_archives ORDER BY from_position`)
	if err != nil {
		return nil, err
	}
	var out []Archive
	var a Archive
	var lastTx *string
	var lastPos *int64
	var sum []byte
	_, err = pgx.ForEachRow(rows, []any{&a.From, &a.To, &a.Events, &lastTx, &lastPos, &sum, &a.FileName, &a.ArchivedAt}, func() error {
		r := a
		copy(r.SHA256[:], sum)
		r.ArchivedAt = r.ArchivedAt.UTC()
		if lastTx != nil && lastPos != nil {
			tx, err := strconv.ParseUint(*lastTx, 10, 64)
			if err != nil {
				return err
			}
			r.Last = &Position{TxID: tx, Pos: *lastPos}
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// checkNotArchived returns ErrArchived when an archived event comes after the given position
// in global order.
func checkNotArchived(ctx context.Context, q Querier, after Position) error {
	var first *int64
	err := q.QueryRow(ctx, `SELECT min(from_position) FROM event_archives
		WHERE last_tx IS NOT NULL AND (last_tx, last_position) > ($1::text::xid8, $2)`,
		strconv.FormatUint(after.TxID, 10), after.Pos).Scan(&first)
	if err != nil || first == nil {
		return err
	}
	return fmt.Errorf("%w: reading after %v would skip archived events from position %d on; restore them first (kyapi restore)",
		ErrArchived, after, *first)
}

// Boundary is where a stream's archived history ends: its last archived event, and for an
// account stream the account's folded state after it (archive.AccountState, as JSON).
type Boundary struct {
	StreamID string
	Version  int64
	Position int64
	Hash     [32]byte
	At       time.Time // recorded_at of the last archived event
	FirstAt  time.Time // recorded_at of the stream's first event
	Account  json.RawMessage
	// Last is the rest of the last archived event's content that Hash is computed from, so
	// that Hash, and what the state says of that event, can be checked (HashMatches). Nil for
	// a boundary recorded before migration 0020, which is trusted as recorded.
	Last *BoundaryEvent
	// Legacy (read from the store, never written) is true when the archive range holding the
	// boundary's last event was archived before migration 0020 made every boundary record that
	// event, and the boundary is one the store held without it when migration 0028 fixed them
	// (legacy_boundaries): only such a boundary may lack Last. Any other without it has lost it
	// (docs/operations.md, "Retention and archiving").
	Legacy bool
	// ListsLegacy (read from the store, never written) is true when some range at or before
	// the boundary was archived before migration 0021 made every account boundary list its
	// archived payments and bonuses, after the stream's first event (so it may hold some of
	// the stream's history): only a boundary with such history may lack the lists (it may
	// have been folded on from one without them). Any other has lost them.
	ListsLegacy bool
	// Orphan (read from the store, never written) is true when no archived range
	// (event_archives) holds the boundary's position: no archive file holds the events it
	// stands for, so nothing can ever restore them, and they were deleted, not archived.
	Orphan bool
}

// BoundaryEvent is the content of a stream's last archived event besides its stream, version
// and time: exactly what EventHash hashed.
type BoundaryEvent struct {
	PrevHash [32]byte // the hash of the event before it (ZeroHash for version 1)
	Type     string
	Payload  json.RawMessage // as stored and hashed
	Metadata json.RawMessage // as stored and hashed
}

// HashMatches reports whether the boundary's last event, recomputed from its recorded content,
// hashes to the boundary's chain hash. It is false for a boundary without that content.
func (b Boundary) HashMatches() bool {
	return b.Last != nil &&
		EventHash(b.Last.PrevHash, b.StreamID, b.Version, b.Last.Type, b.Last.Payload, b.Last.Metadata, b.At) == b.Hash
}

const boundaryColumns = `s.stream_id, b.version, b.position, b.hash, b.recorded_at, b.first_at, b.account,
	b.prev_hash, b.type, b.payload, b.metadata,
	EXISTS (SELECT FROM event_archives a JOIN schema_migrations m ON m.name = '0020_boundary_last_event.sql'
		WHERE a.from_position <= b.position AND b.position < a.to_position AND a.archived_at < m.applied_at) AND
	EXISTS (SELECT FROM legacy_boundaries l WHERE l.stream_no = b.stream_no AND l.version = b.version AND l.hash = b.hash),
	NOT EXISTS (SELECT FROM schema_migrations WHERE name = '0021_boundary_once_lists.sql') OR
	EXISTS (SELECT FROM event_archives a JOIN schema_migrations m ON m.name = '0021_boundary_once_lists.sql'
		WHERE a.from_position <= b.position AND a.archived_at < m.applied_at AND b.first_at < a.archived_at),
	NOT EXISTS (SELECT FROM event_archives a WHERE a.from_position <= b.position AND b.position < a.to_position)`

func scanBoundaries(rows pgx.Rows, err error) ([]Boundary, error) {
	if err != nil {
		return nil, err
	}
	var out []Boundary
	var b Boundary
	var hash, account, prev []byte
	var typ, payload, meta *string
	_, err = pgx.ForEachRow(rows, []any{&b.StreamID, &b.Version, &b.Position, &hash, &b.At, &b.FirstAt, &account,
		&prev, &typ, &payload, &meta, &b.Legacy, &b.ListsLegacy, &b.Orphan}, func() error {
		r := b
		copy(r.Hash[:], hash)
		r.At, r.FirstAt = r.At.UTC(), r.FirstAt.UTC()
		if account != nil {
			r.Account = json.RawMessage(string(account))
		}
		if prev != nil && typ != nil && payload != nil && meta != nil {
			r.Last = &BoundaryEvent{Type: *typ, Payload: json.RawMessage(*payload), Metadata: json.RawMessage(*meta)}
			copy(r.Last.PrevHash[:], prev)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// BoundaryOf returns the boundary of one stream; ok is false when none of its events is
// archived.
func BoundaryOf(ctx context.Context, q Querier, streamID string) (b Boundary, ok bool, err error) {
	bs, err := scanBoundaries(q.Query(ctx, `SELECT `+boundaryColumns+`
		FROM stream_boundaries b JOIN streams s ON s.stream_no = b.stream_no WHERE s.stream_id = $1`, streamID))
	if err != nil || len(bs) == 0 {
		return b, false, err
	}
	return bs[0], true, nil
}

// BoundariesBetween returns the boundaries of the streams numbered lo to hi, by stream id.
func BoundariesBetween(ctx context.Context, q Querier, lo, hi int32) (map[string]Boundary, error) {
	bs, err := scanBoundaries(q.Query(ctx, `SELECT `+boundaryColumns+`
		FROM stream_boundaries b JOIN streams s ON s.stream_no = b.stream_no WHERE b.stream_no BETWEEN $1 AND $2`, lo, hi))
	out := make(map[string]Boundary, len(bs))
	for _, b := range bs {
		out[b.StreamID] = b
	}
	return out, err
}

// BoundariesOf returns the boundaries of the given streams that have one, by stream id.
func BoundariesOf(ctx context.Context, q Querier, streamIDs []string) (map[string]Boundary, error) {
	bs, err := scanBoundaries(q.Query(ctx, `SELECT `+boundaryColumns+`
		FROM stream_boundaries b JOIN streams s ON s.stream_no = b.stream_no WHERE s.stream_id = ANY($1)`, streamIDs))
	out := make(map[string]Boundary, len(bs))
	for _, b := range bs {
		out[b.StreamID] = b
	}
	return out, err
}

// BoundariesInRange returns the boundaries of the streams with events at positions from up
// to, not including, to, by stream id.
func BoundariesInRange(ctx context.Context, q Querier, from, to int64) (map[string]Boundary, error) {
	bs, err := scanBoundaries(q.Query(ctx, `SELECT `+boundaryColumns+`
		FROM stream_boundaries b JOIN streams s ON s.stream_no = b.stream_no
		WHERE b.stream_no IN (SELECT DISTINCT stream_no FROM events WHERE position >= $1 AND position < $2)`, from, to))
	out := make(map[string]Boundary, len(bs))
	for _, b := range bs {
		out[b.StreamID] = b
	}
	return out, err
}

// RangeSummary describes the events in a range of positions.
type RangeSummary struct {
	Events   int64
	Last     *Position // the newest in global order; nil when the range is empty
	NewestAt time.Time // the latest recorded_at
}

// SummarizeRange describes the events with positions from up to, not including, to.
func SummarizeRange(ctx context.Context, q Querier, from, to int64) (RangeSummary, error) {
	var s RangeSummary
	var tx *string
	var pos *int64
	var newest *time.Time
	err := q.QueryRow(ctx, `SELECT count(*), max(recorded_at),
			(SELECT transaction_id::text FROM events WHERE position >= $1 AND position < $2 ORDER BY transaction_id DESC, position DESC LIMIT 1),
			(SELECT position FROM events WHERE position >= $1 AND position < $2 ORDER BY transaction_id DESC, position DESC LIMIT 1)
		FROM events WHERE position >= $1 AND position < $2`, from, to).Scan(&s.Events, &newest, &tx, &pos)
	if err != nil {
		return s, err
	}
	if newest != nil {
		s.NewestAt = newest.UTC()
	}
	if tx != nil && pos != nil {
		txid, err := strconv.ParseUint(*tx, 10, 64)
		if err != nil {
			return s, err
		}
		s.Last = &Position{TxID: txid, Pos: *pos}
	}
	return s, nil
}

// ScanRange calls fn for every event with a position from up to, not including, to, in
// stream and then position order (so each stream's events come together, in version order).
// Rows are streamed: one event is held at a time.
func ScanRange(ctx context.Context, q Querier, from, to int64, fn func(Event) error) error {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+fromEvents+`
		WHERE e.position >= $1 AND e.position < $2 ORDER BY e.stream_no, e.position`, from, to)
	if err != nil {
		return err
	}
	return eachEvent(rows, fn)
}

// ReadSnapshot runs fn in a read-only REPEATABLE READ transaction on db whose snapshot sees
// every archive of events whole or not at all. An archive drops partitions, which no snapshot
// versions: a snapshot taken before an archive committed, reading the events after it, would
// find the archived events gone and their streams' boundaries not yet written (a balance-at
// answering 0, a ledger page missing its first facts without an archived block). So the
// transaction's first statement locks the archive gate (LockForRead), before the snapshot is
// frozen (it comes with the first statement that reads): an archive under way finishes first and
// is seen whole, and one that starts later waits for fn to end (LockForArchive). Keep fn short
// where an archive may run: an archive waits for it at most its lock wait, then fails.
func ReadSnapshot(ctx context.Context, db interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := LockForRead(ctx, tx); err != nil {
			return err
		}
		return fn(tx)
	})
}

// LockForRead locks the archive gate (migration 0024) in ACCESS SHARE mode for the rest of tx.
// As the first statement of a REPEATABLE READ transaction, it makes the snapshot see archives
// whole (ReadSnapshot). Transactions that import that snapshot need not lock it again.
func LockForRead(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `LOCK TABLE archive_gate IN ACCESS SHARE MODE`)
	return err
}

// LockForArchive takes the archive gate (ReadSnapshot's reads in progress end first) and then
// the events table for itself, for the rest of tx, waiting at most wait for each: once it holds
// the lock no append is under way, so a range's events are final. Appends and reads wait for
// tx meanwhile: keep it short.
func LockForArchive(ctx context.Context, tx pgx.Tx, wait time.Duration) error {
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, wait.Milliseconds())); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE archive_gate IN ACCESS EXCLUSIVE MODE`); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `LOCK TABLE events IN ACCESS EXCLUSIVE MODE`)
	return err
}

// DetachArchived drops the partitions of an archived range (whose file has been written),
// its stream marks, records the streams' new boundaries and the archive, in tx (which holds
// LockForArchive).
func DetachArchived(ctx context.Context, tx pgx.Tx, a Archive, parts []Partition, boundaries []Boundary) error {
	for _, p := range parts {
		if _, err := tx.Exec(ctx, `ALTER TABLE events DETACH PARTITION `+pgx.Identifier{p.Name}.Sanitize()); err != nil {
			return fmt.Errorf("eventstore: detach %s: %w", p.Name, err)
		}
		if _, err := tx.Exec(ctx, `DROP TABLE `+pgx.Identifier{p.Name}.Sanitize()); err != nil {
			return fmt.Errorf("eventstore: drop %s: %w", p.Name, err)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM stream_marks WHERE position >= $1 AND position < $2`, a.From, a.To); err != nil {
		return err
	}
	if err := writeBoundaries(ctx, tx, boundaries); err != nil {
		return err
	}
	var lastTx *string
	var lastPos *int64
	if a.Last != nil {
		s := strconv.FormatUint(a.Last.TxID, 10)
		lastTx, lastPos = &s, &a.Last.Pos
	}
	_, err := tx.Exec(ctx, `INSERT INTO event_archives (from_position, to_position, events, last_tx, last_position, sha256, file_name)
		VALUES ($1, $2, $3, $4::text::xid8, $5, $6, $7)`, a.From, a.To, a.Events, lastTx, lastPos, a.SHA256[:], a.FileName)
	return err
}

// writeBoundaries inserts or replaces the boundaries of the given streams.
func writeBoundaries(ctx context.Context, tx pgx.Tx, bs []Boundary) error {
	if len(bs) == 0 {
		return nil
	}
	n := len(bs)
	ids, versions, positions := make([]string, n), make([]int64, n), make([]int64, n)
	hashes, ats, firsts, accounts := make([][]byte, n), make([]time.Time, n), make([]time.Time, n), make([]*string, n)
	prevs, types, payloads, metas := make([][]byte, n), make([]*string, n), make([]*string, n), make([]*string, n)
	for i, b := range bs {
		ids[i], versions[i], positions[i], hashes[i], ats[i], firsts[i] = b.StreamID, b.Version, b.Position, b.Hash[:], b.At, b.FirstAt
		if b.Account != nil {
			s := string(b.Account)
			accounts[i] = &s
		}
		if l := b.Last; l != nil {
			typ, payload, meta := l.Type, string(l.Payload), string(l.Metadata)
			prevs[i], types[i], payloads[i], metas[i] = l.PrevHash[:], &typ, &payload, &meta
		}
	}
	tag, err := tx.Exec(ctx, `INSERT INTO stream_boundaries (stream_no, version, position, hash, recorded_at, first_at, account,
			prev_hash, type, payload, metadata)
		SELECT s.stream_no, u.v, u.p, u.h, u.t, u.f, u.a::jsonb, u.ph, u.ty, u.pl, u.md
		FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bytea[], $5::timestamptz[], $6::timestamptz[], $7::text[],
			$8::bytea[], $9::text[], $10::text[], $11::text[]) AS u(id, v, p, h, t, f, a, ph, ty, pl, md)
		JOIN streams s ON s.stream_id = u.id
		ON CONFLICT (stream_no) DO UPDATE SET version = excluded.version, position = excluded.position, hash = excluded.hash,
			recorded_at = excluded.recorded_at, first_at = excluded.first_at, account = excluded.account,
			prev_hash = excluded.prev_hash, type = excluded.type, payload = excluded.payload, metadata = excluded.metadata`,
		ids, versions, positions, hashes, ats, firsts, accounts, prevs, types, payloads, metas)
	if err == nil && tag.RowsAffected() != int64(n) {
		err = fmt.Errorf("eventstore: %d of %d stream boundaries name a stream that does not exist", int64(n)-tag.RowsAffected(), n)
	}
	return err
}

// RestoreArchived loads an archived range back into the events table as one partition and
// attaches it, in tx: next yields the range's events (from the archive file) until it returns
// false. The streams' boundaries become those before the range (restart; a stream in cleared
// had no archived event before it), its stream marks are noted again, and the archive's row
// goes. It returns the number of events loaded.
func RestoreArchived(ctx context.Context, tx pgx.Tx, a Archive, next func() (Event, bool, error), restart []Boundary, cleared []string) (int64, error) {
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE restored_events (
			position bigint, transaction_id text, stream_id text, version bigint, type text, hash bytea,
			payload text, metadata text, recorded_at timestamptz) ON COMMIT DROP`); err != nil {
		return 0, err
	}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"restored_events"},
		[]string{"position", "transaction_id", "stream_id", "version", "type", "hash", "payload", "metadata", "recorded_at"},
		pgx.CopyFromFunc(func() ([]any, error) {
			e, ok, err := next()
			if err != nil || !ok {
				return nil, err
			}
			return []any{e.Position, strconv.FormatUint(e.TxID, 10), e.StreamID, e.Version, e.Type, e.Hash[:],
				string(e.Payload), string(e.RawMetadata), e.RecordedAt}, nil
		}))
	if err != nil {
		return 0, err
	}
	name := fmt.Sprintf("events_p%019d", a.From)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := tx.Exec(ctx, `CREATE TABLE `+ident+` (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`); err != nil {
		return 0, fmt.Errorf("eventstore: create %s: %w", name, err)
	}
	// Attaching clones the append-only row triggers, not the TRUNCATE one: every partition
	// gets its own, as kyapi_ensure_event_partitions gives the ones it creates.
	if _, err := tx.Exec(ctx, `CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON `+ident+`
		FOR EACH STATEMENT EXECUTE FUNCTION kyapi_append_only()`); err != nil {
		return 0, fmt.Errorf("eventstore: protect %s: %w", name, err)
	}
	// And its streams' estimate, as every partition has (migration 0022).
	if _, err := tx.Exec(ctx, `SELECT kyapi_event_partition_estimates($1)`, name); err != nil {
		return 0, fmt.Errorf("eventstore: estimates of %s: %w", name, err)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+ident+` (position, transaction_id, version, recorded_at, stream_no, type, hash, payload, metadata)
		SELECT r.position, r.transaction_id::xid8, r.version, r.recorded_at, s.stream_no, r.type, r.hash, r.payload::json, r.metadata::json
		FROM restored_events r JOIN streams s ON s.stream_id = r.stream_id
		WHERE r.position >= $1 AND r.position < $2`, a.From, a.To)
	if err != nil {
		return 0, err
	}
	if tag.RowsAffected() != n {
		return 0, fmt.Errorf("eventstore: %d of the %d restored events name an unknown stream or lie outside positions [%d, %d)",
			n-tag.RowsAffected(), n, a.From, a.To)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE events ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)`, ident, a.From, a.To)); err != nil {
		return 0, fmt.Errorf("eventstore: attach %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO stream_marks (stream_no, version, position, recorded_at)
		SELECT stream_no, version, position, recorded_at FROM `+ident+` WHERE version % 256 = 0`); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM stream_boundaries b USING streams s
		WHERE s.stream_no = b.stream_no AND s.stream_id = ANY($1)`, cleared); err != nil {
		return 0, err
	}
	if err := writeBoundaries(ctx, tx, restart); err != nil {
		return 0, err
	}
	tag, err = tx.Exec(ctx, `DELETE FROM event_archives WHERE from_position = $1 AND to_position = $2`, a.From, a.To)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("eventstore: positions [%d, %d) are not archived", a.From, a.To)
	}
	return n, err
}
