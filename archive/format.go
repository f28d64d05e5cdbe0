package archive

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/kyapi/kyapi/eventstore"
)

// The archive file is gzip-compressed JSON, one object per line (docs/operations.md,
// "Retention and archiving", shows an example):
//
//	{"header": {...}}                    format name and version, the position range, its partitions
//	{"event": {...}}                     every event of the range, stream by stream in version order
//	{"stream": {...}}                    after each stream's events: its state before and after them
//	{"summary": {...}}                   counts and the newest event in global order
//	{"sha256": "..."}                    SHA-256 of every byte (uncompressed) before this line
//
// Payload and metadata are kept as the exact text that was hashed, so every event's chain hash
// can be recomputed from the file alone.
const (
	formatName    = "kyapi-event-archive"
	formatVersion = 1
)

type header struct {
	Format        string          `json:"format"`
	FormatVersion int             `json:"format_version"`
	FromPosition  int64           `json:"from_position"`
	ToPosition    int64           `json:"to_position"` // exclusive
	Partitions    []partitionJSON `json:"partitions"`
	CreatedAt     time.Time       `json:"created_at"`
}

type partitionJSON struct {
	Name string `json:"name"`
	From int64  `json:"from"`
	To   int64  `json:"to"`
}

type eventJSON struct {
	Position      int64     `json:"position"`
	TransactionID uint64    `json:"transaction_id,string"`
	StreamID      string    `json:"stream_id"`
	Version       int64     `json:"version"`
	Type          string    `json:"type"`
	RecordedAt    time.Time `json:"recorded_at"`
	Hash          string    `json:"hash"`
	Payload       string    `json:"payload"`
	Metadata      string    `json:"metadata"`
}

func toEventJSON(e eventstore.Event) eventJSON {
	return eventJSON{Position: e.Position, TransactionID: e.TxID, StreamID: e.StreamID, Version: e.Version, Type: e.Type,
		RecordedAt: e.RecordedAt, Hash: hex.EncodeToString(e.Hash[:]), Payload: string(e.Payload), Metadata: string(e.RawMetadata)}
}

func (j eventJSON) event() (eventstore.Event, error) {
	e := eventstore.Event{Position: j.Position, TxID: j.TransactionID, StreamID: j.StreamID, Version: j.Version, Type: j.Type,
		RecordedAt: j.RecordedAt.UTC(), Payload: json.RawMessage(j.Payload), RawMetadata: json.RawMessage(j.Metadata)}
	h, err := decodeHash(j.Hash)
	e.Hash = h
	if err == nil {
		err = json.Unmarshal(e.RawMetadata, &e.Metadata)
	}
	if err != nil {
		err = fmt.Errorf("event at position %d: %w", j.Position, err)
	}
	return e, err
}

// boundaryJSON is a stream's state after its last event so far.
type boundaryJSON struct {
	Version    int64          `json:"version"`
	Position   int64          `json:"position"`
	Hash       string         `json:"hash"`
	RecordedAt time.Time      `json:"recorded_at"`
	FirstAt    time.Time      `json:"first_at"`
	Account    *AccountState  `json:"account,omitempty"`
	LastEvent  *lastEventJSON `json:"last_event,omitempty"` // absent from states recorded before migration 0020
}

// lastEventJSON is the rest of the content of a boundary's last event (eventstore.BoundaryEvent).
type lastEventJSON struct {
	PrevHash string `json:"prev_hash"`
	Type     string `json:"type"`
	Payload  string `json:"payload"`
	Metadata string `json:"metadata"`
}

func toBoundaryJSON(b eventstore.Boundary) (*boundaryJSON, error) {
	j := &boundaryJSON{Version: b.Version, Position: b.Position, Hash: hex.EncodeToString(b.Hash[:]), RecordedAt: b.At, FirstAt: b.FirstAt}
	if l := b.Last; l != nil {
		j.LastEvent = &lastEventJSON{PrevHash: hex.EncodeToString(l.PrevHash[:]), Type: l.Type, Payload: string(l.Payload), Metadata: string(l.Metadata)}
	}
	if b.Account != nil {
		s, err := DecodeAccountState(b.Account)
		if err != nil {
			return nil, err
		}
		j.Account = &s
	}
	return j, nil
}

func (j *boundaryJSON) boundary(streamID string) (eventstore.Boundary, error) {
	b := eventstore.Boundary{StreamID: streamID, Version: j.Version, Position: j.Position, At: j.RecordedAt.UTC(), FirstAt: j.FirstAt.UTC()}
	var err error
	if b.Hash, err = decodeHash(j.Hash); err != nil {
		return b, err
	}
	// A state the file records without its last event was a boundary archived before migration
	// 0020 when this file was written: archive folds on only from such a boundary or one that
	// records its event (CheckBoundary), and the file's content is checked against its digest.
	b.Legacy = j.LastEvent == nil
	// Likewise a state without the lists of archived payments and bonuses was recorded, or folded
	// on from one recorded, before migration 0021: the file's digest vouches for it.
	b.ListsLegacy = true
	if l := j.LastEvent; l != nil {
		b.Last = &eventstore.BoundaryEvent{Type: l.Type, Payload: json.RawMessage(l.Payload), Metadata: json.RawMessage(l.Metadata)}
		if b.Last.PrevHash, err = decodeHash(l.PrevHash); err != nil {
			return b, err
		}
	}
	if j.Account != nil {
		b.Account, err = json.Marshal(j.Account)
	}
	return b, err
}

// streamJSON closes a stream's events: where they started from (nil: the stream's first
// event is in this file) and where they end.
type streamJSON struct {
	StreamID string        `json:"stream_id"`
	Events   int64         `json:"events"`
	Start    *boundaryJSON `json:"start"`
	End      *boundaryJSON `json:"end"`
}

type summaryJSON struct {
	Events       int64  `json:"events"`
	Streams      int64  `json:"streams"`
	LastTx       string `json:"last_transaction_id,omitempty"`
	LastPosition *int64 `json:"last_position,omitempty"`
}

// line is any line of the file.
type line struct {
	Header  *header      `json:"header,omitempty"`
	Event   *eventJSON   `json:"event,omitempty"`
	Stream  *streamJSON  `json:"stream,omitempty"`
	Summary *summaryJSON `json:"summary,omitempty"`
	SHA256  string       `json:"sha256,omitempty"`
}

func decodeHash(s string) ([32]byte, error) {
	var h [32]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return h, fmt.Errorf("hash %q is not 64 hex digits", s)
	}
	copy(h[:], b)
	return h, nil
}

// writer writes lines, hashing every byte.
type writer struct {
	gz  *gzip.Writer
	buf *bufio.Writer
	sum hash.Hash
}

func newWriter(w io.Writer) *writer {
	gz := gzip.NewWriter(w)
	sum := sha256.New()
	return &writer{gz: gz, buf: bufio.NewWriterSize(io.MultiWriter(gz, sum), 1<<16), sum: sum}
}

func (w *writer) write(l line) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := w.buf.Write(append(b, '\n')); err != nil {
		return err
	}
	return nil
}

// close writes the digest line and ends the compressed stream; it returns the digest.
func (w *writer) close() ([32]byte, error) {
	var digest [32]byte
	if err := w.buf.Flush(); err != nil {
		return digest, err
	}
	w.sum.Sum(digest[:0])
	b, _ := json.Marshal(line{SHA256: hex.EncodeToString(digest[:])})
	if _, err := w.gz.Write(append(b, '\n')); err != nil {
		return digest, err
	}
	return digest, w.gz.Close()
}

// reader reads lines, hashing every byte until the digest line.
type reader struct {
	r      *bufio.Reader
	sum    hash.Hash
	digest string // the digest line's value, once read
	n      int    // lines read
}

// errFormat wraps every problem with the file's content.
var errFormat = errors.New("not a valid archive file")

func newReader(r io.Reader) (*reader, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errFormat, err)
	}
	return &reader{r: bufio.NewReaderSize(gz, 1<<16), sum: sha256.New()}, nil
}

// next returns the next line; ok is false after the digest line.
func (r *reader) next() (l line, ok bool, err error) {
	if r.digest != "" {
		return l, false, nil
	}
	b, err := r.r.ReadBytes('\n')
	if errors.Is(err, io.EOF) {
		return l, false, fmt.Errorf("%w: it ends after %d lines without its sha256 line (truncated?)", errFormat, r.n)
	}
	if err != nil {
		return l, false, fmt.Errorf("%w: %v", errFormat, err)
	}
	r.n++
	if err := json.Unmarshal(b, &l); err != nil {
		return l, false, fmt.Errorf("%w: line %d: %v", errFormat, r.n, err)
	}
	if l.SHA256 != "" {
		r.digest = l.SHA256
		if _, err := r.r.ReadByte(); !errors.Is(err, io.EOF) {
			return l, false, fmt.Errorf("%w: content after the sha256 line", errFormat)
		}
		return l, false, nil
	}
	r.sum.Write(b)
	return l, true, nil
}
