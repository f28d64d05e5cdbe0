package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Head is a stream's newest state: the version, hash and time the next append starts from.
type Head struct {
	No      int32 // the stream's number: what events and stream_marks store instead of its id
	ID      string
	Version int64
	Hash    [32]byte  // hash of the event at Version; zero for an empty stream
	At      time.Time // recorded_at of the event at Version; the zero time for an empty stream
	// Position is the event at Version's position as the head was read (0 for an empty
	// stream). Add does not move it: positions are given when a batch is written.
	Position int64
}

// HeadColumns are the columns of streams that ScanHeads reads, in its order.
const HeadColumns = `stream_no, stream_id, version, head_hash, head_at, coalesce(head_position, 0)`

// HeadsByNoSQL reads the heads of the streams numbered $1 (integer[]). It does not lock them:
// callers hold a lock of their own (an account row) that keeps other appenders out, and
// run it after taking that lock, so its snapshot shows the head the last appender left.
const HeadsByNoSQL = `SELECT ` + HeadColumns + ` FROM streams WHERE stream_no = ANY($1)`

// ScanHeads reads the rows of HeadsByNoSQL (or any query of HeadColumns) into a map by number.
func ScanHeads(rows pgx.Rows, err error) (map[int32]*Head, error) {
	if err != nil {
		return nil, err
	}
	out := map[int32]*Head{}
	var h Head
	var hash []byte
	var at *time.Time
	_, err = pgx.ForEachRow(rows, []any{&h.No, &h.ID, &h.Version, &hash, &at, &h.Position}, func() error {
		head := h
		copy(head.Hash[:], hash)
		if at != nil {
			head.At = at.UTC()
		}
		out[head.No] = &head
		return nil
	})
	return out, err
}

// OpenHeads returns the heads of the given streams, creating the streams that do not exist yet
// (at version 0). With lock, the heads are locked for the rest of the transaction, in stream
// number order; the streams are created in stream id order: two transactions opening
// overlapping sets, new streams or not, cannot deadlock. Without lock, the caller must hold a
// lock of its own that keeps other appenders of these streams out.
func OpenHeads(ctx context.Context, q Querier, lock bool, streamIDs ...string) (map[string]*Head, error) {
	if _, err := q.Exec(ctx, `INSERT INTO streams (stream_id)
		SELECT id FROM unnest($1::text[]) AS id
		WHERE NOT EXISTS (SELECT 1 FROM streams s WHERE s.stream_id = id)
		ORDER BY id
		ON CONFLICT (stream_id) DO NOTHING`, streamIDs); err != nil {
		return nil, fmt.Errorf("eventstore: open streams: %w", err)
	}
	sql := `SELECT ` + HeadColumns + ` FROM streams WHERE stream_id = ANY($1)`
	if lock {
		sql += ` ORDER BY stream_no FOR UPDATE`
	}
	byNo, err := ScanHeads(q.Query(ctx, sql, streamIDs))
	if err != nil {
		return nil, fmt.Errorf("eventstore: read heads: %w", err)
	}
	out := make(map[string]*Head, len(byNo))
	for _, h := range byNo {
		out[h.ID] = h
	}
	return out, nil
}

// HeadsByNo returns the heads of the streams with the given numbers (see HeadsByNoSQL).
func HeadsByNo(ctx context.Context, q Querier, nos ...int32) (map[int32]*Head, error) {
	return ScanHeads(q.Query(ctx, HeadsByNoSQL, nos))
}

// Batch is a set of appends to one or more streams, written by one statement (Write). Each
// append starts from a head read in the same transaction; the statement moves every head only
// from the version it was read at, or aborts the transaction.
type Batch struct {
	heads map[int32]*batchHead
	order []int32

	evStreams  []int32
	evVersions []int64
	evAts      []time.Time
	evTypes    []string
	evHashes   [][]byte
	evPayloads []string
	evMetadata []string
}

type batchHead struct {
	expected int64
	head     *Head
}

// Add appends events to the stream whose head is h, recorded at `at` — or at h.At when that is
// later, so that within a stream recorded_at never decreases with version — and moves h on to
// the new head. Several Adds to one head chain in order. It returns the time the events are
// recorded at (truncated to PostgreSQL's microseconds).
func (b *Batch) Add(h *Head, at time.Time, events ...NewEvent) (time.Time, error) {
	at = at.UTC().Truncate(time.Microsecond)
	if at.Before(h.At) {
		at = h.At
	}
	if len(events) == 0 {
		return at, nil
	}
	if b.heads == nil {
		b.heads = map[int32]*batchHead{}
	}
	bh, ok := b.heads[h.No]
	if !ok {
		bh = &batchHead{expected: h.Version, head: h}
		b.heads[h.No] = bh
		b.order = append(b.order, h.No)
	} else if bh.head != h {
		return at, fmt.Errorf("eventstore: two heads of stream %s in one batch", h.ID)
	}
	for _, e := range events {
		payload, err := marshalPayload(e)
		if err != nil {
			return at, err
		}
		meta, metaText := emptyMetadataJSON, emptyMetadata
		if e.Metadata != (Metadata{}) {
			if meta, err = json.Marshal(e.Metadata); err != nil {
				return at, err
			}
			metaText = string(meta)
		}
		version := h.Version + 1
		sum := EventHash(h.Hash, h.ID, version, e.Type, payload, meta, at)
		b.evStreams = append(b.evStreams, h.No)
		b.evVersions = append(b.evVersions, version)
		b.evAts = append(b.evAts, at)
		b.evTypes = append(b.evTypes, e.Type)
		b.evHashes = append(b.evHashes, sum[:])
		b.evPayloads = append(b.evPayloads, string(payload))
		b.evMetadata = append(b.evMetadata, metaText)
		h.Version, h.Hash, h.At = version, sum, at
	}
	return at, nil
}

// JSONAppender is a payload that appends its own JSON, exactly what json.Marshal would write
// for it, sparing the append json.Marshal's reflection (domain.RequestCharged: the event of
// every metered request).
type JSONAppender interface {
	AppendJSON(b []byte) []byte
}

// emptyMetadata is json.Marshal(Metadata{}), what nearly every event carries (only read).
const emptyMetadata = "{}"

var emptyMetadataJSON = []byte(emptyMetadata)

func marshalPayload(e NewEvent) ([]byte, error) {
	if a, ok := e.Payload.(JSONAppender); ok {
		return a.AppendJSON(make([]byte, 0, 128)), nil
	}
	if raw, ok := e.Payload.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return nil, fmt.Errorf("eventstore: %s payload is not JSON", e.Type)
		}
		return raw, nil
	}
	p, err := json.Marshal(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("eventstore: marshal %s: %w", e.Type, err)
	}
	return p, nil
}

// Len is the number of events in the batch.
func (b *Batch) Len() int { return len(b.evStreams) }

// WriteSQL is the statement that writes a batch; WriteArgs its arguments. Callers that
// pipeline it with other statements of their transaction (pgx.Batch) queue both and read the
// outcome with CheckWrite.
const WriteSQL = `SELECT kyapi_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// WriteArgs are the arguments of WriteSQL for this batch.
func (b *Batch) WriteArgs() []any {
	return append(b.headArgs(), b.EventArgs()...)
}

// EventArgs are the batch's events as arrays, in order: stream numbers, versions, times, types,
// hashes, payloads and metadata (WriteSQL's last seven arguments; a statement that appends
// otherwise, kyapi_charge, derives each stream's new head from its last event).
func (b *Batch) EventArgs() []any {
	return []any{b.evStreams, b.evVersions, b.evAts, b.evTypes, b.evHashes, b.evPayloads, b.evMetadata}
}

// headArgs are the heads the batch moves: stream numbers, the versions they were read at, and
// the new versions, hashes and times.
func (b *Batch) headArgs() []any {
	n := len(b.order)
	nos, expected, versions, ats := make([]int32, n), make([]int64, n), make([]int64, n), make([]time.Time, n)
	hashes := make([][]byte, n)
	for i, no := range b.order {
		bh := b.heads[no]
		nos[i], expected[i], versions[i], ats[i] = no, bh.expected, bh.head.Version, bh.head.At
		hashes[i] = slices.Clone(bh.head.Hash[:])
	}
	return []any{nos, expected, versions, hashes, ats}
}

// Written reports, for every stream the batch appends to, whether the batch's events for it are
// in the store. A writer that lost its transaction's outcome (the connection failed after
// COMMIT was sent) asks, once that transaction can no longer commit, what it wrote. Each event
// is found by the stream index from the position of the head the batch started from, by its
// version and hash; a stream is written only when every one of the batch's events for it is
// there. Its first event alone does not tell: another writer starting from the same head may
// have appended an event identical to it (the same fact at the same recorded time: every
// metered request of one key for the same resource and balance, two clocks behind the head's),
// and the batch's later events are then missing — a transaction commits all of them or none.
func (b *Batch) Written(ctx context.Context, q Querier) (map[int32]bool, error) {
	var nos []int32
	var after, versions []int64
	var hashes [][]byte
	for i, no := range b.evStreams {
		nos, after, versions = append(nos, no), append(after, b.heads[no].head.Position), append(versions, b.evVersions[i])
		hashes = append(hashes, b.evHashes[i])
	}
	rows, err := q.Query(ctx, `SELECT u.no FROM unnest($1::int[], $2::bigint[], $3::bigint[], $4::bytea[]) AS u(no, after, version, hash)
		GROUP BY u.no
		HAVING bool_and(EXISTS (SELECT 1 FROM events e
			WHERE e.stream_no = u.no AND e.position > u.after AND e.version = u.version AND e.hash = u.hash))`,
		nos, after, versions, hashes)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]bool, len(b.heads))
	for _, no := range nos {
		out[no] = false
	}
	var no int32
	_, err = pgx.ForEachRow(rows, []any{&no}, func() error { out[no] = true; return nil })
	return out, err
}

// CheckWrite turns the outcome of WriteSQL into nil, ErrVersionConflict, ErrNoPartition or the
// error.
func CheckWrite(err error) error {
	if err == nil {
		return nil
	}
	return MapError(fmt.Errorf("eventstore: append: %w", err))
}

// Write writes the batch inside tx. An empty batch writes nothing.
func Write(ctx context.Context, tx pgx.Tx, b *Batch) error {
	if b.Len() == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, WriteSQL, b.WriteArgs()...)
	return CheckWrite(err)
}

// Append appends events to one stream at its head h (read in this transaction, see Batch.Add)
// and writes them. It returns the time they were recorded at.
func Append(ctx context.Context, tx pgx.Tx, h *Head, at time.Time, events ...NewEvent) (time.Time, error) {
	var b Batch
	at, err := b.Add(h, at, events...)
	if err != nil {
		return at, err
	}
	return at, Write(ctx, tx, &b)
}

// ZeroHash is the "previous hash" of a stream's first event.
var ZeroHash [32]byte

// EventHash is the SHA-256 of an event's canonical content chained to prev, the hash of the
// stream's previous event (ZeroHash for version 1): prev, then the stream id, version, type,
// payload and metadata (each variable-length field preceded by its length as a big-endian
// uint32) and recorded_at in Unix microseconds (big-endian int64). The SQL function
// kyapi_event_hash computes the same.
func EventHash(prev [32]byte, streamID string, version int64, typ string, payload, metadata []byte, at time.Time) [32]byte {
	// One buffer hashed at once: writing the fields to a hash.Hash one by one costs an
	// allocation each (they escape through the interface) and a call each.
	var small [512]byte
	buf := small[:0]
	if n := 32 + 4 + len(streamID) + 8 + 4 + len(typ) + 4 + len(payload) + 4 + len(metadata) + 8; n > len(small) {
		buf = make([]byte, 0, n)
	}
	buf = append(buf, prev[:]...)
	buf = appendField(buf, streamID)
	buf = binary.BigEndian.AppendUint64(buf, uint64(version))
	buf = appendField(buf, typ)
	buf = appendField(buf, payload)
	buf = appendField(buf, metadata)
	buf = binary.BigEndian.AppendUint64(buf, uint64(at.UnixMicro()))
	return sha256.Sum256(buf)
}

func appendField[T string | []byte](buf []byte, b T) []byte {
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
	return append(buf, b...)
}

// Verify recomputes e's hash from its content and prev (the hash of the stream's previous
// event): ok is false when the stored hash does not match.
func Verify(prev [32]byte, e Event) bool {
	return EventHash(prev, e.StreamID, e.Version, e.Type, e.Payload, e.RawMetadata, e.RecordedAt) == e.Hash
}
