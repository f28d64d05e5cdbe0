package eventstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// fromEvents joins each event to its stream's id.
const fromEvents = ` FROM events e JOIN streams s ON s.stream_no = e.stream_no `

// fromEventsByKey joins each event to its stream's id by one primary-key probe per event.
// Reads of a range of the global order use it: joined as fromEvents, the planner builds a
// hash of every stream (a sequential scan of streams, which grows with the catalog and the
// accounts) for a range of a few dozen events, and the projections read such a range many
// times a second (docs/benchmarks.md). The LIMIT keeps the lookup a nested probe.
const fromEventsByKey = ` FROM events e
	JOIN LATERAL (SELECT stream_id FROM streams WHERE streams.stream_no = e.stream_no LIMIT 1) s ON true `

// ReadStream returns the events of one stream with version > after, in version order.
func ReadStream(ctx context.Context, q Querier, streamID string, after int64) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+fromEvents+`
		WHERE s.stream_id = $1 AND e.stream_no = (SELECT stream_no FROM streams WHERE stream_id = $1) AND e.version > $2
		ORDER BY e.position`, streamID, after)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// StreamPageSQL is ReadStreamPage's statement: $1 the stream id, $2 the position after which
// the page starts, $3 the page size. Exported so that a benchmark can EXPLAIN what is served.
const StreamPageSQL = `SELECT ` + eventColumns + fromEvents + `
		WHERE s.stream_id = $1 AND e.stream_no = (SELECT stream_no FROM streams WHERE stream_id = $1) AND e.position > $2
		ORDER BY e.position LIMIT $3`

// StreamPageSettings hold for the rest of the transaction that reads a page (ReadStreamPage).
// A plan made for the parameters' values (PostgreSQL's first five executions of a prepared
// statement on a connection) estimates a stream's events from the partition's fixed estimate
// (migration 0022), about a hundred, whatever the stream holds, and the partitions made ahead,
// empty, are scanned unordered: it sorted every later event of a long stream (a million
// charges: 350 ms a page) to keep a hundred. Without sorts, the page is read in order from
// the stream index of each partition, and stops at the limit.
const StreamPageSettings = `SET LOCAL enable_sort = off`

// ReadStreamPage returns up to limit events of one stream whose position is after the given
// one, in order. Within a stream, position order is version order, and the stream index holds
// (stream, position): any page costs one index descent per partition of the store, the first
// and the last alike. tx is the transaction the page is read in: StreamPageSettings hold for
// the rest of it.
func ReadStreamPage(ctx context.Context, tx pgx.Tx, streamID string, afterPosition int64, limit int) ([]Event, error) {
	if _, err := tx.Exec(ctx, StreamPageSettings); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, StreamPageSQL, streamID, afterPosition, limit)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// LastAtSQL is LastAt's statement: $1 the stream id, $2 the instant, $3 math.MaxInt64.
// Exported so that a benchmark can EXPLAIN what is served.
const LastAtSQL = `
		WITH st AS (SELECT stream_no FROM streams WHERE stream_id = $1),
		lo AS (SELECT m.position FROM stream_marks m WHERE m.stream_no = (SELECT stream_no FROM st) AND m.recorded_at <= $2
			ORDER BY m.recorded_at DESC, m.version DESC LIMIT 1),
		hi AS (SELECT m.position FROM stream_marks m WHERE m.stream_no = (SELECT stream_no FROM st) AND m.recorded_at > $2
			ORDER BY m.recorded_at, m.version LIMIT 1)
		SELECT ` + eventColumns + fromEvents + `
		WHERE s.stream_id = $1 AND e.stream_no = (SELECT stream_no FROM st)
		  AND e.position >= coalesce((SELECT position FROM lo), 0)
		  AND e.position < coalesce((SELECT position FROM hi), $3)
		  AND e.recorded_at <= $2
		ORDER BY e.position DESC LIMIT 1`

// LastAt returns the newest event of a stream recorded at or before at; ok is false when the
// stream has none. Within a stream recorded_at never decreases with version, so the events at
// or before `at` are a prefix of the stream: stream_marks (every 256th event, by time) bound
// the search to the events between two marks. The stream's number is a parameter of the marks
// lookups (not a join), so each is one descent of stream_marks_time in its order: joined, the
// planner fetched every mark on the far side of `at` and sorted them, which grows with the
// stream (docs/benchmarks.md, growth).
func LastAt(ctx context.Context, q Querier, streamID string, at time.Time) (e Event, ok bool, err error) {
	rows, err := q.Query(ctx, LastAtSQL, streamID, at, int64(math.MaxInt64))
	if err != nil {
		return e, false, err
	}
	events, err := scanEvents(rows)
	if err != nil || len(events) == 0 {
		return e, false, err
	}
	return events[0], true, nil
}

// StreamHead returns the head of one stream; ok is false when the stream does not exist.
func StreamHead(ctx context.Context, q Querier, streamID string) (h Head, ok bool, err error) {
	heads, err := ScanHeads(q.Query(ctx, `SELECT `+HeadColumns+` FROM streams WHERE stream_id = $1`, streamID))
	if err != nil {
		return h, false, err
	}
	for _, head := range heads {
		return *head, true, nil
	}
	return h, false, nil
}

// visible restricts a read to transactions that can no longer commit anything new below
// them: every transaction with an id under the snapshot's xmin has ended, so no event can
// later appear behind a reader that has passed it.
const visible = `e.transaction_id < pg_snapshot_xmin(pg_current_snapshot())`

// ReadAll returns up to limit events after the given position, in global order, never
// skipping one that commits later with a lower position.
func ReadAll(ctx context.Context, q Querier, after Position, limit int) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+fromEventsByKey+`
		WHERE (e.transaction_id, e.position) > ($1::text::xid8, $2) AND `+visible+`
		ORDER BY e.transaction_id, e.position LIMIT $3`, strconv.FormatUint(after.TxID, 10), after.Pos, limit)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// NextBatch finds the end of the next batch of at most limit visible events after the given
// position, without reading their bodies. n is 0 when there is nothing new. It is
// ErrArchived when archived events come after the position: a projection rebuilt from 0, or
// one that had not passed a range when it was archived, would otherwise miss them.
func NextBatch(ctx context.Context, q Querier, after Position, limit int) (end Position, n int, err error) {
	if err := checkNotArchived(ctx, q, after); err != nil {
		return after, 0, err
	}
	var tx string
	err = q.QueryRow(ctx, `SELECT transaction_id::text AS tx_text, position, count(*) OVER () FROM (
			SELECT e.transaction_id, e.position FROM events e
			WHERE (e.transaction_id, e.position) > ($1::text::xid8, $2) AND `+visible+`
			ORDER BY e.transaction_id, e.position LIMIT $3) o
		ORDER BY transaction_id DESC, position DESC LIMIT 1`,
		strconv.FormatUint(after.TxID, 10), after.Pos, limit).Scan(&tx, &end.Pos, &n)
	if errors.Is(err, pgx.ErrNoRows) {
		return after, 0, nil
	}
	if err != nil || n == 0 {
		return after, 0, err
	}
	end.TxID, err = strconv.ParseUint(tx, 10, 64)
	return end, n, err
}

// DenseTypes are the event types that make up nearly all of a store: the metered requests.
// The events_sparse index (migration 0017) holds every other event, so a reader that wants
// none of these passes over none of them (NextBatchOf, ReadRangeOf).
var DenseTypes = []string{"RequestCharged", "RequestDeduplicated"}

// sparseSQL is the events_sparse index's predicate, written as the index is so that the
// planner matches it.
const sparseSQL = `e.type <> 'RequestCharged' AND e.type <> 'RequestDeduplicated'`

// sparse reports whether a read of types can go through events_sparse: it names types, and
// none of DenseTypes.
func sparse(types []string) bool {
	for _, t := range types {
		if slices.Contains(DenseTypes, t) {
			return false
		}
	}
	return len(types) > 0
}

// NextBatchOf is NextBatch for a reader of types only (none: every type). When types are
// sparse (none of DenseTypes), the range is found through events_sparse, passing over the
// metered requests: it ends at the limit-th event of types after the position or, when there
// are fewer, at the newest visible event of any type, so that the reader's checkpoint moves
// past the charges too; n counts the events of types in it, and may be 0 for a range of
// charges only. Nothing new is an end that is not after the position.
func NextBatchOf(ctx context.Context, q Querier, after Position, limit int, types []string) (end Position, n int, err error) {
	if !sparse(types) {
		return NextBatch(ctx, q, after, limit)
	}
	if err := checkNotArchived(ctx, q, after); err != nil {
		return after, 0, err
	}
	// One statement, so one snapshot: the range's end and its count agree even while events
	// of types commit meanwhile.
	var tx string
	err = q.QueryRow(ctx, `WITH last AS (
			SELECT transaction_id, position, count(*) OVER () AS n FROM (
				SELECT e.transaction_id, e.position FROM events e
				WHERE (e.transaction_id, e.position) > ($1::text::xid8, $2) AND `+visible+`
				  AND `+sparseSQL+` AND e.type = ANY ($4::text[])
				ORDER BY e.transaction_id, e.position LIMIT $3) s
			ORDER BY transaction_id DESC, position DESC LIMIT 1),
		newest AS (
			SELECT e.transaction_id, e.position FROM events e
			WHERE (e.transaction_id, e.position) > ($1::text::xid8, $2) AND `+visible+`
			ORDER BY e.transaction_id DESC, e.position DESC LIMIT 1)
		SELECT coalesce(last.n, 0)::int,
			(CASE WHEN last.n = $3 THEN last.transaction_id ELSE newest.transaction_id END)::text,
			CASE WHEN last.n = $3 THEN last.position ELSE newest.position END
		FROM newest LEFT JOIN last ON true`,
		strconv.FormatUint(after.TxID, 10), after.Pos, limit, types).Scan(&n, &tx, &end.Pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return after, 0, nil // nothing visible after the position
	}
	if err != nil {
		return after, 0, err
	}
	end.TxID, err = strconv.ParseUint(tx, 10, 64)
	return end, n, err
}

// ReadRange returns the events in (after, upto] in global order (see ReadRangeOf). upto must
// come from NextBatch, so that the range is closed: no transaction can add to it any more.
func ReadRange(ctx context.Context, q Querier, after, upto Position) ([]Event, error) {
	return ReadRangeOf(ctx, q, nil, after, upto)
}

// RangeSQL is ReadRangeOf's statement: $1, $2 the position after which the range starts
// (transaction id as text, position), $3, $4 its last one, $5 the event types to read (none:
// every type). Exported so that a test can EXPLAIN what the projections run.
//
// The BETWEEN on transaction_id alone says nothing the row comparisons do not; it is there
// for the planner, which cannot estimate a row comparison and took a range in the middle of
// the store for a third of it: every batch of a rebuild scanned the whole partition.
const RangeSQL = rangeSelect + `
		  AND (cardinality($5::text[]) = 0 OR e.type = ANY ($5::text[]))
		ORDER BY e.transaction_id, e.position`

// SparseRangeSQL is RangeSQL for sparse types (none of DenseTypes): through events_sparse,
// passing over the charges.
const SparseRangeSQL = rangeSelect + `
		  AND ` + sparseSQL + ` AND e.type = ANY ($5::text[])
		ORDER BY e.transaction_id, e.position`

// rangeSelect is what RangeSQL and SparseRangeSQL share: the columns and the range's bounds.
const rangeSelect = `SELECT e.position, e.transaction_id::text AS tx_text, e.stream_no, e.version, e.type, e.payload, e.recorded_at
		FROM events e
		WHERE (e.transaction_id, e.position) > ($1::text::xid8, $2)
		  AND (e.transaction_id, e.position) <= ($3::text::xid8, $4)
		  AND e.transaction_id BETWEEN $1::text::xid8 AND $3::text::xid8`

// ReadRangeWhole is ReadRangeOf in a snapshot that sees archives whole (ReadSnapshot), or
// ErrArchived when an archive took events after after before the range was read. A reader
// that holds no projection checkpoint's lock (the place index, a replay's read-ahead) finds a
// range in one statement and reads it in another: an archive committed between them dropped
// the range's events, and ReadRangeOf alone would return it empty, its reader then moving its
// checkpoint past places it never saw.
func ReadRangeWhole(ctx context.Context, db interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, names *StreamNames, after, upto Position, types ...string) ([]Event, error) {
	var out []Event
	err := ReadSnapshot(ctx, db, func(tx pgx.Tx) error {
		if err := checkNotArchived(ctx, tx, after); err != nil {
			return err
		}
		var err error
		out, err = ReadRangeOf(ctx, tx, names, after, upto, types...)
		return err
	})
	return out, err
}

// ReadRangeOf returns the events in (after, upto] in global order whose type is one of types
// (none: every type), for projections: what an event says, not how it is kept — no hash and no
// metadata. A projection of the accounts never loads the catalog's large payloads, and the
// catalog's never loads the charges. Each event's stream id comes from names, a cache of the
// database's stream numbers (nil: read for the range), so a range of thousands of charges costs
// no lookup per event.
func ReadRangeOf(ctx context.Context, q Querier, names *StreamNames, after, upto Position, types ...string) ([]Event, error) {
	if types == nil {
		types = []string{}
	}
	sp := sparse(types)
	sql := RangeSQL
	if sp {
		sql = SparseRangeSQL
	}
	rows, err := q.Query(ctx, sql,
		strconv.FormatUint(after.TxID, 10), after.Pos, strconv.FormatUint(upto.TxID, 10), upto.Pos, types)
	if err != nil {
		return nil, err
	}
	// Positions are handed out in nearly the order transactions commit, so the range holds
	// about upto.Pos - after.Pos events: sized so, the slice is not copied as it grows. (Not
	// for a sparse read, whose range is mostly the charges it passes over.)
	var out []Event
	if !sp {
		out = make([]Event, 0, min(max(upto.Pos-after.Pos, 0), rangeCapHint))
	}
	var e Event
	var tx string
	var payload []byte // a new slice for every row
	if _, err := pgx.ForEachRow(rows, []any{&e.Position, &tx, &e.StreamNo, &e.Version, &e.Type, &payload, &e.RecordedAt}, func() error {
		var err error
		if e.TxID, err = strconv.ParseUint(tx, 10, 64); err != nil {
			return err
		}
		e.Payload = payload
		e.RecordedAt = e.RecordedAt.UTC()
		out = append(out, e)
		return nil
	}); err != nil {
		return nil, err
	}
	if names == nil {
		names = NewStreamNames()
	}
	return out, names.resolve(ctx, q, out)
}

// rangeCapHint bounds the capacity ReadRangeOf reserves before it reads a row.
const rangeCapHint = 1 << 15

// StreamNames holds the ids of one database's streams by number. A stream's id never changes,
// so an entry is never stale; the cache starts over past maxStreamNames.
type StreamNames struct {
	mu  sync.Mutex
	ids map[int32]string
}

// NewStreamNames returns an empty cache, for one database.
func NewStreamNames() *StreamNames { return &StreamNames{ids: map[int32]string{}} }

const maxStreamNames = 2_000_000

// resolve sets the StreamID of every event, reading the numbers it does not hold in one query.
func (c *StreamNames) resolve(ctx context.Context, q Querier, events []Event) error {
	var missing []int32
	c.mu.Lock()
	for i := range events {
		if id, ok := c.ids[events[i].StreamNo]; ok {
			events[i].StreamID = id
		} else if !slices.Contains(missing, events[i].StreamNo) {
			missing = append(missing, events[i].StreamNo)
		}
	}
	c.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, `SELECT stream_no, stream_id FROM streams WHERE stream_no = ANY($1)`, missing)
	if err != nil {
		return err
	}
	found := make(map[int32]string, len(missing))
	var no int32
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&no, &id}, func() error { found[no] = id; return nil }); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ids)+len(found) > maxStreamNames {
		clear(c.ids)
	}
	maps.Copy(c.ids, found)
	for i := range events {
		if events[i].StreamID == "" {
			if events[i].StreamID = found[events[i].StreamNo]; events[i].StreamID == "" {
				return fmt.Errorf("eventstore: event %d names stream %d, which does not exist", events[i].Position, events[i].StreamNo)
			}
		}
	}
	return nil
}

// GlobalHead returns the position of the newest committed event. A reader that has passed it
// has seen everything committed before GlobalHead was called.
func GlobalHead(ctx context.Context, q Querier) (Position, error) {
	var tx string
	var p Position
	err := q.QueryRow(ctx, `SELECT transaction_id::text AS tx_text, position FROM events
		ORDER BY transaction_id DESC, position DESC LIMIT 1`).Scan(&tx, &p.Pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return Position{}, nil
	}
	if err != nil {
		return p, err
	}
	p.TxID, err = strconv.ParseUint(tx, 10, 64)
	return p, err
}

// TotalEvents is the number of events in the store: the sum of every stream's version.
func TotalEvents(ctx context.Context, q Querier) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT coalesce(sum(version), 0)::bigint FROM streams`).Scan(&n)
	return n, err
}

// StreamsWritten counts the streams among ids that hold at least one event.
func StreamsWritten(ctx context.Context, q Querier, ids []string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM streams WHERE stream_id = ANY($1) AND version > 0`, ids).Scan(&n)
	return n, err
}

// SettledPosition returns a position at or below which no event can still commit: the newest
// position handed out so far, once every transaction that could hold one at or below it has
// ended. It is the projections' rule (a transaction whose id is under the snapshot's xmin has
// ended) applied to positions: the append statement takes its transaction id before any
// position, so a transaction holding a position handed out before the sequence was read has an
// id below a fresh one taken after (pg_current_xact_id in a transaction of its own; not
// pg_snapshot_xmax, which is one past the newest id that has ended, and may be the id of an
// append still running). It waits for the transactions running now to end, as a projection
// waits for them to deliver; call it outside a transaction.
func SettledPosition(ctx context.Context, q Querier) (int64, error) {
	var top int64
	if err := q.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM event_position_seq`).Scan(&top); err != nil {
		return 0, err
	}
	var fresh string
	if err := q.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&fresh); err != nil {
		return 0, err
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		var settled bool
		if err := q.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::text::xid8`, fresh).Scan(&settled); err != nil {
			return 0, err
		}
		if settled {
			return top, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// HeadsAt calls fn with the head of every stream as of position: its newest event at or below
// it (streams with none are left out), in stream id order (byte order). That event may be
// archived: a stream appended to since position whose events at or below it are all archived
// has its archived boundary as its head then. Call it in a snapshot
// taken after SettledPosition returned position, so that no head it shows can still change.
// Most heads are read from the streams table; only streams appended to since position are
// looked up in the events.
func HeadsAt(ctx context.Context, q Querier, position int64, fn func(Head) error) error {
	rows, err := q.Query(ctx, `SELECT s.stream_no, s.stream_id, h.version, h.hash, h.recorded_at
		FROM streams s CROSS JOIN LATERAL (
			SELECT s.version, s.head_hash AS hash, s.head_at AS recorded_at WHERE s.head_position <= $1
			UNION ALL
			(SELECT x.version, x.hash, x.recorded_at FROM (
				(SELECT e.position, e.version, e.hash, e.recorded_at FROM events e
				 WHERE s.head_position > $1 AND e.stream_no = s.stream_no AND e.position <= $1
				 ORDER BY e.position DESC LIMIT 1)
				UNION ALL
				SELECT b.position, b.version, b.hash, b.recorded_at FROM stream_boundaries b
				WHERE s.head_position > $1 AND b.stream_no = s.stream_no AND b.position <= $1) x
			 ORDER BY x.position DESC LIMIT 1)) h
		WHERE s.version > 0
		ORDER BY s.stream_id COLLATE "C"`, position)
	if err != nil {
		return err
	}
	defer rows.Close()
	var h Head
	var hash []byte
	for rows.Next() {
		if err := rows.Scan(&h.No, &h.ID, &h.Version, &hash, &h.At); err != nil {
			return err
		}
		copy(h.Hash[:], hash)
		h.At = h.At.UTC()
		if err := fn(h); err != nil {
			return err
		}
	}
	return rows.Err()
}

// StreamIDs maps every stream's number to its id.
func StreamIDs(ctx context.Context, q Querier) (map[int32]string, error) {
	rows, err := q.Query(ctx, `SELECT stream_no, stream_id FROM streams`)
	if err != nil {
		return nil, err
	}
	out := map[int32]string{}
	var no int32
	var id string
	_, err = pgx.ForEachRow(rows, []any{&no, &id}, func() error { out[no] = id; return nil })
	return out, err
}

// ScanUpTo calls fn with every event at or below position whose stream number is in [fromNo,
// toNo], ordered by stream number and then position (version order within a stream), one row
// at a time. StreamID is left empty (see StreamIDs): fn sees the stream's number.
func ScanUpTo(ctx context.Context, q Querier, position int64, fromNo, toNo int32, fn func(no int32, e *Event) error) error {
	rows, err := q.Query(ctx, `SELECT position, transaction_id::text AS tx_text, stream_no, version, type, payload::text, metadata::text, recorded_at, hash
		FROM events WHERE position <= $1 AND stream_no BETWEEN $2 AND $3
		ORDER BY stream_no, position`, position, fromNo, toNo)
	if err != nil {
		return err
	}
	var (
		e             Event
		tx            string
		no            int32
		payload, meta string
		hash          []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&e.Position, &tx, &no, &e.Version, &e.Type, &payload, &meta, &e.RecordedAt, &hash}, func() error {
		txid, err := strconv.ParseUint(tx, 10, 64)
		if err != nil {
			return err
		}
		e.TxID, e.Payload, e.RawMetadata = txid, []byte(payload), []byte(meta)
		e.RecordedAt = e.RecordedAt.UTC()
		copy(e.Hash[:], hash)
		return fn(no, &e)
	})
	return err
}

// StreamHeadPosition is the position of a stream's newest event (0 when it has none).
func StreamHeadPosition(ctx context.Context, q Querier, streamID string) (int64, error) {
	var p int64
	err := q.QueryRow(ctx, `SELECT coalesce(head_position, 0) FROM streams WHERE stream_id = $1`, streamID).Scan(&p)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return p, err
}

// ReadStreamWindow calls fn with the events of one stream recorded in [from, to), in order,
// one row at a time. Within a stream recorded_at never decreases with version, so the window
// is a run of consecutive events: stream_marks bound the scan to it and at most 256 events on
// either side, however long the stream.
func ReadStreamWindow(ctx context.Context, q Querier, streamID string, from, to time.Time, fn func(Event) error) error {
	rows, err := q.Query(ctx, `
		WITH st AS (SELECT stream_no FROM streams WHERE stream_id = $1),
		lo AS (SELECT m.position FROM stream_marks m WHERE m.stream_no = (SELECT stream_no FROM st) AND m.recorded_at < $2
			ORDER BY m.recorded_at DESC, m.version DESC LIMIT 1),
		hi AS (SELECT m.position FROM stream_marks m WHERE m.stream_no = (SELECT stream_no FROM st) AND m.recorded_at >= $3
			ORDER BY m.recorded_at, m.version LIMIT 1)
		SELECT `+eventColumns+fromEvents+`
		WHERE s.stream_id = $1 AND e.stream_no = (SELECT stream_no FROM st)
		  AND e.position >= coalesce((SELECT position FROM lo), 0)
		  AND e.position <= coalesce((SELECT position FROM hi), $4)
		  AND e.recorded_at >= $2 AND e.recorded_at < $3
		ORDER BY e.position`, streamID, from, to, int64(math.MaxInt64))
	if err != nil {
		return err
	}
	return eachEvent(rows, fn)
}
