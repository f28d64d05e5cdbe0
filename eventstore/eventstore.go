// Package eventstore owns the append-only event log in PostgreSQL: appends with an expected
// stream version, reads of one stream, and reads of all streams in a global order that never
// skips an event.
package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrVersionConflict means the stream was not at the expected version: someone else appended
// first. The caller reloads and decides again; nothing was written.
var ErrVersionConflict = errors.New("eventstore: stream version conflict")

// Metadata travels with every event: who caused it and in answer to what.
type Metadata struct {
	RequestID   string `json:"request_id,omitempty"`
	Actor       string `json:"actor,omitempty"`
	CausationID string `json:"causation_id,omitempty"`
}

// NewEvent is an event about to be appended. Payload is marshalled to JSON.
type NewEvent struct {
	Type     string
	Payload  any
	Metadata Metadata
}

// Event is a stored event.
type Event struct {
	Position   int64
	TxID       uint64
	StreamID   string
	Version    int64
	Type       string
	Payload    json.RawMessage
	Metadata   Metadata
	RecordedAt time.Time
}

// At is the event's place in the global order.
func (e Event) At() Position { return Position{TxID: e.TxID, Pos: e.Position} }

// Position is a point in the global order: events are ordered by (transaction id, position),
// which is the order in which they become visible to readers.
type Position struct {
	TxID uint64 `json:"tx"`
	Pos  int64  `json:"pos"`
}

// Less reports whether p comes before q.
func (p Position) Less(q Position) bool {
	return p.TxID < q.TxID || (p.TxID == q.TxID && p.Pos < q.Pos)
}

func (p Position) String() string { return fmt.Sprintf("%d/%d", p.TxID, p.Pos) }

// ParsePosition reads the form String writes; "" is the start.
func ParsePosition(s string) (Position, error) {
	if s == "" {
		return Position{}, nil
	}
	var p Position
	if _, err := fmt.Sscanf(s, "%d/%d", &p.TxID, &p.Pos); err != nil {
		return Position{}, fmt.Errorf("eventstore: bad position %q", s)
	}
	return p, nil
}

// Querier is what reads need: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Store is the PostgreSQL event store.
type Store struct {
	Pool *pgxpool.Pool
	// OnAppend, when set, is called after a transaction holding appends commits, so that
	// in-process subscribers can poll at once instead of waiting for their next tick.
	OnAppend func()
}

// New returns a store over pool.
func New(pool *pgxpool.Pool) *Store { return &Store{Pool: pool} }

// Append writes events to streamID inside tx, provided the stream is at expected (0 for a
// new stream). It returns the stream's new version. It never overwrites: a stream that moved
// on gives ErrVersionConflict.
func (s *Store) Append(ctx context.Context, tx pgx.Tx, streamID string, expected int64, at time.Time, events ...NewEvent) (int64, error) {
	if len(events) == 0 {
		return expected, nil
	}
	op, err := NewAppendOp(streamID, expected, at, events...)
	if err != nil {
		return 0, err
	}
	if err := op.Check(tx.Exec(ctx, op.SQL, op.Args...)); err != nil {
		return 0, err
	}
	return op.NewVersion(), nil
}

// AppendOp is an append as one SQL statement, for callers that pipeline it with other
// statements of their transaction (pgx.Batch). Check interprets its result.
type AppendOp struct {
	SQL      string
	Args     []any
	streamID string
	expected int64
	count    int
}

// The guard sees the stream's current version; two appenders that both pass it collide on
// UNIQUE (stream_id, version), so exactly one wins.
const appendSQL = `
	INSERT INTO events (stream_id, version, type, payload, metadata, recorded_at)
	SELECT $1, $2 + n.ord, n.type, n.payload::jsonb, n.meta::jsonb, $6
	FROM unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS n(type, payload, meta, ord)
	WHERE (SELECT coalesce(max(version), 0) FROM events WHERE stream_id = $1) = $2`

// NewAppendOp prepares the append of events to streamID at expected.
func NewAppendOp(streamID string, expected int64, at time.Time, events ...NewEvent) (*AppendOp, error) {
	types := make([]string, len(events))
	payloads := make([]string, len(events))
	metas := make([]string, len(events))
	for i, e := range events {
		p, err := json.Marshal(e.Payload)
		if err != nil {
			return nil, fmt.Errorf("eventstore: marshal %s: %w", e.Type, err)
		}
		m, err := json.Marshal(e.Metadata)
		if err != nil {
			return nil, err
		}
		types[i], payloads[i], metas[i] = e.Type, string(p), string(m)
	}
	return &AppendOp{SQL: appendSQL, Args: []any{streamID, expected, types, payloads, metas, at},
		streamID: streamID, expected: expected, count: len(events)}, nil
}

// NewVersion is the stream's version once the append has succeeded.
func (op *AppendOp) NewVersion() int64 { return op.expected + int64(op.count) }

// Check turns the statement's outcome into nil, ErrVersionConflict or the error.
func (op *AppendOp) Check(tag pgconn.CommandTag, err error) error {
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return ErrVersionConflict
		}
		return fmt.Errorf("eventstore: append to %s: %w", op.streamID, err)
	}
	if tag.RowsAffected() != int64(op.count) {
		return ErrVersionConflict
	}
	return nil
}

// Appended tells in-process subscribers that a transaction with appends has committed.
func (s *Store) Appended() {
	if s.OnAppend != nil {
		s.OnAppend()
	}
}

// WithTx runs fn in a transaction and announces the appends it made once it commits.
func (s *Store) WithTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if err := pgx.BeginFunc(ctx, s.Pool, fn); err != nil {
		return err
	}
	s.Appended()
	return nil
}

// The transaction id is read as text (pgx has no xid8 codec) under another name: an output
// column named transaction_id would make ORDER BY transaction_id sort the text, and
// "10000" < "9999" would reorder, skip and repeat events at every power of ten.
const eventColumns = `position, transaction_id::text AS tx_text, stream_id, version, type, payload, metadata, recorded_at`

// ReadStream returns the events of one stream with version > after, in version order.
func ReadStream(ctx context.Context, q Querier, streamID string, after int64) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE stream_id = $1 AND version > $2 ORDER BY version`, streamID, after)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// visible restricts a read to transactions that can no longer commit anything new below
// them: every transaction with an id under the snapshot's xmin has ended, so no event can
// later appear behind a reader that has passed it.
const visible = `transaction_id < pg_snapshot_xmin(pg_current_snapshot())`

// ReadAll returns up to limit events after the given position, in global order, never
// skipping one that commits later with a lower position.
func ReadAll(ctx context.Context, q Querier, after Position, limit int) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE (transaction_id, position) > ($1::text::xid8, $2) AND `+visible+`
		ORDER BY transaction_id, position LIMIT $3`, strconv.FormatUint(after.TxID, 10), after.Pos, limit)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// NextBatch finds the end of the next batch of at most limit visible events after the given
// position, without reading their bodies. n is 0 when there is nothing new.
func NextBatch(ctx context.Context, q Querier, after Position, limit int) (end Position, n int, err error) {
	var tx string
	err = q.QueryRow(ctx, `SELECT transaction_id::text AS tx_text, position, count(*) OVER () FROM (
			SELECT transaction_id, position FROM events
			WHERE (transaction_id, position) > ($1::text::xid8, $2) AND `+visible+`
			ORDER BY transaction_id, position LIMIT $3) o
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

// ReadRange returns the events in (after, upto] in global order. upto must come from
// NextBatch, so that the range is closed: no transaction can add to it any more.
func ReadRange(ctx context.Context, q Querier, after, upto Position) ([]Event, error) {
	return ReadRangeOf(ctx, q, after, upto, "")
}

// ReadRangeOf is ReadRange restricted to the streams whose id starts with streamPrefix
// ("" for all). A projection that reads only account streams then never loads the catalog's
// large payloads.
func ReadRangeOf(ctx context.Context, q Querier, after, upto Position, streamPrefix string) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE (transaction_id, position) > ($1::text::xid8, $2)
		  AND (transaction_id, position) <= ($3::text::xid8, $4)
		  AND starts_with(stream_id, $5)
		ORDER BY transaction_id, position`,
		strconv.FormatUint(after.TxID, 10), after.Pos, strconv.FormatUint(upto.TxID, 10), upto.Pos, streamPrefix)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// Head returns the position of the newest committed event. A reader that has passed it has
// seen everything committed before Head was called.
func Head(ctx context.Context, q Querier) (Position, error) {
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

func scanEvents(rows pgx.Rows) ([]Event, error) {
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var tx string
		var meta []byte
		if err := rows.Scan(&e.Position, &tx, &e.StreamID, &e.Version, &e.Type, &e.Payload, &meta, &e.RecordedAt); err != nil {
			return nil, err
		}
		var err error
		if e.TxID, err = strconv.ParseUint(tx, 10, 64); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(meta, &e.Metadata); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
