// Package eventstore owns the append-only event log in PostgreSQL: stream heads, appends that
// move a head only from the version the appender read, per-stream hash chains, reads of one
// stream (whole, by page, or as of an instant), and reads of all streams in a global order that
// never skips an event. Every statement that touches the events, streams and stream_marks
// tables lives in this package.
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

// ErrVersionConflict means a stream was not at the version the appender read: someone else
// appended first. The transaction has been aborted by the database; nothing of it was written.
var ErrVersionConflict = errors.New("eventstore: stream version conflict")

// ErrNoPartition means an event's position fell beyond the last partition of the events
// table. EnsurePartitions creates the missing ones; Store.WithTx does so and runs its function
// again.
var ErrNoPartition = errors.New("eventstore: no partition of events for the position")

// Metadata travels with every event: who caused it and in answer to what.
type Metadata struct {
	RequestID   string `json:"request_id,omitempty"`
	Actor       string `json:"actor,omitempty"`
	CausationID string `json:"causation_id,omitempty"`
}

// NewEvent is an event about to be appended. Payload is marshalled to JSON, unless it is a
// json.RawMessage, which is stored as it is.
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
	StreamNo   int32 // the stream's number, where the read says it (ReadRangeOf)
	Version    int64
	Type       string
	Payload    json.RawMessage
	Metadata   Metadata
	RecordedAt time.Time
	// Hash is the SHA-256 of the event's canonical content chained to the previous event of
	// its stream (EventHash).
	Hash [32]byte
	// RawMetadata is the metadata exactly as stored (and hashed).
	RawMetadata json.RawMessage
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

// Appended tells in-process subscribers that a transaction with appends has committed.
func (s *Store) Appended() {
	if s.OnAppend != nil {
		s.OnAppend()
	}
}

// WithTx runs fn in a transaction and announces the appends it made once it commits. When an
// append found no partition for its position, the missing partitions are created and fn runs
// once more; when PostgreSQL ended the transaction to break a deadlock (two transactions
// locking the same rows in different orders: a multi-file `kyapi import` beside another
// import of the same records), fn runs again, up to maxDeadlockRetries times. Nothing of a
// failed run was committed, so fn must only be able to run again. A COMMIT whose answer was
// lost is looked up (runTx): committed, it is a success; if that cannot be found out, the error
// is ErrCommitOutcomeUnknown, never one that says nothing was written.
func (s *Store) WithTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	ensured, deadlocks := false, 0
	for {
		err := s.runTx(ctx, fn)
		switch {
		case err == nil:
			s.Appended()
			return nil
		case errors.Is(err, ErrNoPartition) && !ensured:
			ensured = true
			if _, perr := EnsurePartitions(ctx, s.Pool); perr != nil {
				return errors.Join(err, perr)
			}
		case IsLockConflict(err) && deadlocks < maxDeadlockRetries:
			deadlocks++
		default:
			return err
		}
	}
}

// maxDeadlockRetries bounds how often WithTx runs a function again after a deadlock (or a
// serialization failure, IsLockConflict).
const maxDeadlockRetries = 3

// IsLockConflict tells a deadlock or serialization failure, after which the whole
// transaction can only be rolled back and tried again.
func IsLockConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// EnsurePartitions creates the partitions of the events table that the next appends need (two
// partition sizes ahead of the position sequence) and returns how many it created.
func EnsurePartitions(ctx context.Context, q Querier) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT kyapi_ensure_event_partitions()`).Scan(&n)
	return n, err
}

// MapError turns a failed append statement into ErrVersionConflict or ErrNoPartition (wrapping
// the database error), or leaves it as it is.
func MapError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch {
	case pgErr.Code == "KY001" || pgErr.Code == "23505":
		return fmt.Errorf("%w: %s", ErrVersionConflict, pgErr.Message)
	case pgErr.Code == "23514" && pgErr.TableName == "events":
		return fmt.Errorf("%w: %s", ErrNoPartition, pgErr.Message)
	}
	return err
}

// eventColumns are read by every event query, in scanEvents' order. The transaction id is read
// as text (pgx has no xid8 codec) under another name: an output column named transaction_id
// would make ORDER BY transaction_id sort the text, and "10000" < "9999" would reorder, skip
// and repeat events at every power of ten.
const eventColumns = `e.position, e.transaction_id::text AS tx_text, s.stream_id, e.version, e.type,
	e.payload, e.metadata, e.recorded_at, e.hash`

func scanEvents(rows pgx.Rows) ([]Event, error) {
	defer rows.Close()
	var out []Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// eachEvent calls fn with the events of rows (a query of eventColumns), one at a time, and
// closes rows.
func eachEvent(rows pgx.Rows, fn func(Event) error) error {
	defer rows.Close()
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return rows.Err()
}

func scanEvent(row pgx.Row) (Event, error) {
	var e Event
	var tx string
	var payload, meta, hash []byte
	if err := row.Scan(&e.Position, &tx, &e.StreamID, &e.Version, &e.Type, &payload, &meta, &e.RecordedAt, &hash); err != nil {
		return e, err
	}
	var err error
	if e.TxID, err = strconv.ParseUint(tx, 10, 64); err != nil {
		return e, err
	}
	e.Payload, e.RawMetadata = payload, meta
	e.RecordedAt = e.RecordedAt.UTC()
	copy(e.Hash[:], hash)
	if err := json.Unmarshal(meta, &e.Metadata); err != nil {
		return e, fmt.Errorf("eventstore: metadata of event %d: %w", e.Position, err)
	}
	return e, nil
}
