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

// catalogWriteChunk is the number of events per append statement: large enough to keep round
// trips few, small enough to keep each statement's parameters a few megabytes.
const catalogWriteChunk = 2000

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
	now := h.now()
	err = h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		res.Created, res.Updated = 0, 0
		heads, err := eventstore.OpenHeads(ctx, tx, true, streams...)
		if err != nil {
			return err
		}
		for start := 0; start < len(appends); start += catalogWriteChunk {
			var b eventstore.Batch
			for _, a := range appends[start:min(start+catalogWriteChunk, len(appends))] {
				head := heads[a.stream]
				if head.Version == 0 {
					res.Created++
				} else {
					res.Updated++
				}
				if _, err := b.Add(head, now, eventstore.NewEvent{Type: a.typ, Payload: json.RawMessage(a.payload), Metadata: meta}); err != nil {
					return err
				}
			}
			if err := eventstore.Write(ctx, tx, &b); err != nil {
				return fmt.Errorf("import: append catalog events: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return ImportResult{}, err
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
