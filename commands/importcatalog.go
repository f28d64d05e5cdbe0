package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// ImportCatalog imports an NDJSON catalog batch (docs/api.md, "Catalog import"): all of it or
// nothing.
type ImportCatalog struct {
	Store *eventstore.Store
	Clock func() time.Time
}

// ImportResult counts the distinct records of an import. Created records had no stream
// before; Updated ones replace an earlier import.
type ImportResult struct {
	Towns   int `json:"towns"`
	Places  int `json:"places"`
	Events  int `json:"events"`
	Created int `json:"created"`
	Updated int `json:"updated"`
}

// catalogWriteChunk is the most events per append statement: large enough to keep round trips
// few. catalogWriteBytes bounds the statement's payloads too: an import line may hold 1 MiB,
// and 2,000 of them would be a message PostgreSQL cannot take (over 1 GiB: `kyapi import`
// of a file within every documented limit failed with "message body too large"). A variable
// for the tests.
const catalogWriteChunk = 2000

var catalogWriteBytes = 64 << 20

// catalogAppend is one record's event, ready to append.
type catalogAppend struct {
	stream, typ string
	payload     []byte
}

// Handle validates the whole batch, then appends one imported event per record — each at its
// record's stream head, whatever version that is, since the same id again is an update — in a
// single transaction. A bad line gives its *domain.ImportError and writes nothing. The heads are
// locked in stream order, so concurrent imports of the same records run one after the other.
func (h ImportCatalog) Handle(ctx context.Context, r io.Reader, meta eventstore.Metadata) (ImportResult, error) {
	cat, err := domain.ParseCatalog(r)
	if err != nil {
		return ImportResult{}, err
	}
	var res ImportResult
	err = h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		res, err = h.write(ctx, tx, cat, meta, h.now())
		return err
	})
	if err != nil {
		return ImportResult{}, err
	}
	return res, nil
}

// BatchError is the error of one batch of HandleBatches, and which one it was (from 0).
type BatchError struct {
	Batch int
	Err   error
}

func (e *BatchError) Error() string { return e.Err.Error() }
func (e *BatchError) Unwrap() error { return e.Err }

// HandleBatches imports n batches (the files of `kyapi import`) as one: in one transaction,
// each batch read from open(i), validated and appended in turn, so that a bad line anywhere
// applies nothing of any batch. A batch's records are in memory only while it is appended;
// open may be called again for a batch when the transaction has to start over. The error of
// a batch is a *BatchError saying which.
func (h ImportCatalog) HandleBatches(ctx context.Context, n int, open func(i int) (io.ReadCloser, error), meta eventstore.Metadata) ([]ImportResult, error) {
	var results []ImportResult
	err := h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		results = make([]ImportResult, 0, n)
		now := h.now()
		for i := range n {
			res, err := h.writeBatch(ctx, tx, open, i, meta, now)
			if err != nil {
				return &BatchError{Batch: i, Err: err}
			}
			results = append(results, res)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// writeBatch reads batch i from open, validates it and appends it in tx.
func (h ImportCatalog) writeBatch(ctx context.Context, tx pgx.Tx, open func(i int) (io.ReadCloser, error), i int, meta eventstore.Metadata, now time.Time) (ImportResult, error) {
	r, err := open(i)
	if err != nil {
		return ImportResult{}, err
	}
	defer r.Close()
	cat, err := domain.ParseCatalog(r)
	if err != nil {
		return ImportResult{}, err
	}
	return h.write(ctx, tx, cat, meta, now)
}

// write appends the events of a validated batch in tx.
func (h ImportCatalog) write(ctx context.Context, tx pgx.Tx, cat domain.Catalog, meta eventstore.Metadata, now time.Time) (ImportResult, error) {
	appends, err := catalogAppends(cat)
	if err != nil {
		return ImportResult{}, err
	}
	res := ImportResult{Towns: len(cat.Towns), Places: len(cat.Places), Events: len(cat.Events)}
	if len(appends) == 0 {
		return res, nil
	}
	streams := make([]string, len(appends))
	for i, a := range appends {
		streams[i] = a.stream
	}
	heads, err := eventstore.OpenHeads(ctx, tx, true, streams...)
	if err != nil {
		return ImportResult{}, err
	}
	for start, end := 0, 0; start < len(appends); start = end {
		for size := 0; end < len(appends) && end-start < catalogWriteChunk &&
			(end == start || size+len(appends[end].payload) <= catalogWriteBytes); end++ {
			size += len(appends[end].payload)
		}
		var b eventstore.Batch
		for _, a := range appends[start:end] {
			head := heads[a.stream]
			if head.Version == 0 {
				res.Created++
			} else {
				res.Updated++
			}
			if _, err := b.Add(head, now, eventstore.NewEvent{Type: a.typ, Payload: json.RawMessage(a.payload), Metadata: meta}); err != nil {
				return ImportResult{}, err
			}
		}
		if err := eventstore.Write(ctx, tx, &b); err != nil {
			return ImportResult{}, fmt.Errorf("import: append catalog events: %w", err)
		}
	}
	return res, nil
}

func (h ImportCatalog) now() time.Time {
	if h.Clock == nil {
		return time.Now()
	}
	return h.Clock()
}

func catalogAppends(cat domain.Catalog) ([]catalogAppend, error) {
	out := make([]catalogAppend, 0, cat.Records())
	add := func(stream, typ string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("import: marshal %s: %w", stream, err)
		}
		out = append(out, catalogAppend{stream: stream, typ: typ, payload: b})
		return nil
	}
	for _, t := range cat.Towns {
		if err := add(domain.TownStream(t.Slug), domain.EventTownImported, t); err != nil {
			return nil, err
		}
	}
	for _, p := range cat.Places {
		if err := add(domain.PlaceStream(p.PlaceID), domain.EventPlaceImported, p); err != nil {
			return nil, err
		}
	}
	for _, e := range cat.Events {
		if err := add(domain.CalendarEventStream(e.EventID), domain.EventCalendarEventImported, e); err != nil {
			return nil, err
		}
	}
	return out, nil
}
