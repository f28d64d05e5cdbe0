package projections

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// PlaceIndex feeds the search index (embedded or Elasticsearch) from PlaceImported events.
// Its checkpoint lives in the index itself, written with the documents, so each serving
// process's embedded copy knows exactly where it stands.
type PlaceIndex struct {
	Pool  *pgxpool.Pool
	Index placeindex.Index
}

func (PlaceIndex) Name() string { return "placeindex" }

// MaxBatch bounds the events of one index batch, whatever a catch-up or a rebuild asks: the
// embedded index builds each batch's segment in memory, and batches of 1,000 places halve a
// start's peak RSS (150,000 places: 266 MB, not 525) at the same speed.
func (PlaceIndex) MaxBatch() int { return 1000 }

// rebuildBatch bounds the events of one batch of a rebuild: a generation being filled is
// written in bigger batches than a live catch-up (fewer segments for the embedded index to
// merge), which `kyapi rebuild` can spend the memory on. At GOGC=400, 5,000 rather than 2,000
// took a 150,000-place rebuild from 14.5 s to 14.0 s, for about 500 MB more at its peak
// (docs/operations.md, "kyapi rebuild").
const rebuildBatch = 5000

// placeTypes are the events the index reads: nothing but places.
var placeTypes = []string{domain.EventPlaceImported}

func (p PlaceIndex) Checkpoint(ctx context.Context) (eventstore.Position, error) {
	s, err := p.Index.Checkpoint(ctx)
	if err != nil {
		return eventstore.Position{}, err
	}
	return eventstore.ParsePosition(s)
}

// Handle reads the range in a short query and only then writes the index: no database
// transaction is held open across index I/O.
func (p PlaceIndex) Handle(ctx context.Context, from, to eventstore.Position) error {
	return p.handleRead(ctx, from, to, nil)
}

func (PlaceIndex) eventTypes() []string { return placeTypes }

// handleRead applies (from, to]; events are the range's, read ahead, or nil to read them here.
func (p PlaceIndex) handleRead(ctx context.Context, from, to eventstore.Position, events []eventstore.Event) error {
	at, err := p.Checkpoint(ctx)
	if err != nil {
		return err
	}
	if !at.Less(to) {
		return nil
	}
	if at.Less(from) {
		return errCheckpointMoved // the range does not hold the events before it
	}
	if events == nil {
		if events, err = eventstore.ReadRangeWhole(ctx, p.Pool, streamNames(p.Pool), from, to, placeTypes...); err != nil {
			return err
		}
	}
	if at != from {
		// Another writer of this index (an Elasticsearch index is shared) moved its checkpoint
		// into the range: what comes after it is still to apply.
		events = memberEvents(events, from, at, nil, nil)
	}
	docs, err := PlaceDocsFromEvents(events)
	if err != nil {
		return err
	}
	return p.Index.Upsert(ctx, docs, nil, to.String())
}

// Rebuild fills a new generation of the index from position 0 and swaps it in; readers
// keep the old one until then.
func (p PlaceIndex) Rebuild(ctx context.Context, batchSize int, report func(applied int, at eventstore.Position)) (int, error) {
	total, batchSize := 0, min(batchSize, rebuildBatch)
	err := p.Index.Rebuild(ctx, func(w placeindex.Writer) error {
		at, n, err := replay(ctx, p.Pool, p.Name(), eventstore.Position{}, batchSize, p.eventTypes(), eventstore.Position{}, report,
			func(r readAhead) error {
				docs, err := PlaceDocsFromEvents(r.events)
				if err != nil {
					return err
				}
				return w.Upsert(ctx, docs, nil, r.to.String())
			})
		total = n
		if err != nil {
			return err
		}
		return w.Upsert(ctx, nil, nil, at.String())
	})
	return total, err
}
