package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// ImportCatalog imports an NDJSON catalog batch (decisions §9): all of it or nothing.
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

// catalogImportAttempts bounds the retries after a concurrent import of the same records.
const catalogImportAttempts = 3

// catalogInsertChunk is the number of events per INSERT: large enough to keep round trips
// few, small enough to keep each statement's parameters a few megabytes.
const catalogInsertChunk = 2000

// catalogAppend is one record's event, ready to insert.
type catalogAppend struct {
	stream, typ string
	payload     string
}

// Handle validates the whole batch, then appends one imported event per record in a single
// transaction. A bad line gives its *domain.ImportError and writes nothing.
func (h ImportCatalog) Handle(ctx context.Context, r io.Reader, meta eventstore.Metadata) (ImportResult, error) {
	cat, err := domain.ParseCatalog(r)
	if err != nil {
		return ImportResult{}, err
	}
	appends, err := catalogAppends(cat)
	if err != nil {
		return ImportResult{}, err
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return ImportResult{}, err
	}
	res := ImportResult{Towns: len(cat.Towns), Places: len(cat.Places), Events: len(cat.Events)}
	if len(appends) == 0 {
		return res, nil
	}
	for attempt := 1; ; attempt++ {
		res.Created, res.Updated = 0, 0
		err = h.Store.WithTx(ctx, func(tx pgx.Tx) error {
			created, err := catalogInsertEvents(ctx, tx, appends, string(metaJSON), h.now())
			res.Created, res.Updated = created, len(appends)-created
			return err
		})
		if !errors.Is(err, eventstore.ErrVersionConflict) || attempt == catalogImportAttempts {
			break
		}
	}
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
		out = append(out, catalogAppend{stream: stream, typ: typ, payload: string(b)})
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

// catalogInsertEvents appends each record's event at its stream's version + 1, in the
// events table's own shape (see eventstore.Append). Versions are read once for all streams;
// an importer that appends to one of them after the read collides on UNIQUE (stream_id,
// version), which is the same expected-version guard Append relies on, and gives
// eventstore.ErrVersionConflict. It returns how many streams were new.
func catalogInsertEvents(ctx context.Context, tx pgx.Tx, appends []catalogAppend, meta string, at time.Time) (created int, err error) {
	streams := make([]string, len(appends))
	for i, a := range appends {
		streams[i] = a.stream
	}
	versions := make(map[string]int64, len(appends))
	rows, err := tx.Query(ctx, `SELECT stream_id, max(version) FROM events WHERE stream_id = ANY($1) GROUP BY 1`, streams)
	if err != nil {
		return 0, fmt.Errorf("import: read stream versions: %w", err)
	}
	var (
		id string
		v  int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error { versions[id] = v; return nil }); err != nil {
		return 0, fmt.Errorf("import: read stream versions: %w", err)
	}
	for start := 0; start < len(appends); start += catalogInsertChunk {
		chunk := appends[start:min(start+catalogInsertChunk, len(appends))]
		ids := make([]string, len(chunk))
		vers := make([]int64, len(chunk))
		types := make([]string, len(chunk))
		payloads := make([]string, len(chunk))
		for i, a := range chunk {
			ids[i], vers[i], types[i], payloads[i] = a.stream, versions[a.stream]+1, a.typ, a.payload
			if vers[i] == 1 {
				created++
			}
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO events (stream_id, version, type, payload, metadata, recorded_at)
			SELECT n.stream_id, n.version, n.type, n.payload::jsonb, $5::jsonb, $6
			FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) WITH ORDINALITY
				AS n(stream_id, version, type, payload, ord)
			ORDER BY n.ord`,
			ids, vers, types, payloads, meta, at)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23505" {
				return 0, eventstore.ErrVersionConflict
			}
			return 0, fmt.Errorf("import: append catalog events: %w", err)
		}
	}
	return created, nil
}
