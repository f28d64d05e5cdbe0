package projections

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// PlaceIndex feeds the search index (embedded or Elasticsearch) from PlaceImported events.
// Its checkpoint lives in the index itself, written with the documents, so each serving
// process's embedded copy knows exactly where it stands.
//
// The checkpoint names the event store its position is in (eventstore.StoreID): an index
// built from another store (a DATA_DIR served before from another database) is not taken for
// this one's, whose events below that position it would skip (docs/operations.md, "The place
// index and its event store").
type PlaceIndex struct {
	Pool  *pgxpool.Pool
	Index placeindex.Index
	// Store is the event store's identity, eventstore.StoreID of Pool; read from Pool when "".
	Store string
}

// ErrIndexOfAnotherStore is the error of a place index whose checkpoint names another event
// store than the one it is fed from.
type ErrIndexOfAnotherStore struct {
	Index, Store string // the store the index was built from, and this one
}

func (e *ErrIndexOfAnotherStore) Error() string {
	return fmt.Sprintf("the place index was built from another event store (%s; this database's is %s): its checkpoint is not a position of this store's",
		e.Index, e.Store)
}

// ErrIndexPastStore is the error of a place index whose checkpoint is no position of the
// history of the store it is fed from, though it names that store (or none): the index was fed
// from a copy of this database that went on past it (the database was restored from a backup,
// or a replica promoted behind its primary), and holds imports this one does not. Fed as it
// is, it would keep them, and skip this store's events below its checkpoint.
type ErrIndexPastStore struct {
	At eventstore.Position // the index's checkpoint
}

func (e *ErrIndexPastStore) Error() string {
	return fmt.Sprintf("the place index was built up to position %v, which this event store does not hold: it was fed from a copy of this database "+
		"that went on past it (a backup restored, a replica promoted behind its primary) and holds imports this database does not", e.At)
}

// storeMark separates the position from the store's identity in an index checkpoint,
// "TX/POS store=ID". The position comes first: a version that does not know identities reads
// it, and ignores the rest, while versions are rolled.
const storeMark = " store="

func (p PlaceIndex) store(ctx context.Context) (string, error) {
	if p.Store != "" {
		return p.Store, nil
	}
	return eventstore.StoreID(ctx, p.Pool)
}

// checkpointOf is what the index stores as its checkpoint at position at.
func checkpointOf(store string, at eventstore.Position) string {
	return at.String() + storeMark + store
}

// readCheckpoint reads the index's checkpoint: its position, and the store it names ("" when
// it names none: "" for an empty index, or one written before checkpoints named their store).
func (p PlaceIndex) readCheckpoint(ctx context.Context) (eventstore.Position, string, error) {
	s, err := p.Index.Checkpoint(ctx)
	if err != nil {
		return eventstore.Position{}, "", err
	}
	pos, store, _ := strings.Cut(s, storeMark)
	at, err := eventstore.ParsePosition(pos)
	return at, store, err
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

// Checkpoint is the index's position in this store. An index whose checkpoint names another
// store is an *ErrIndexOfAnotherStore; one that names none is taken as this store's.
func (p PlaceIndex) Checkpoint(ctx context.Context) (eventstore.Position, error) {
	at, built, err := p.readCheckpoint(ctx)
	if err != nil || built == "" {
		return at, err
	}
	store, err := p.store(ctx)
	if err != nil {
		return eventstore.Position{}, err
	}
	if built != store {
		return eventstore.Position{}, &ErrIndexOfAnotherStore{Index: built, Store: store}
	}
	return at, nil
}

// Claim makes sure the index is this store's before it is fed: an index whose checkpoint
// names no store (written before checkpoints named one) is taken as this store's, and its
// checkpoint now names it; one that names another store is an *ErrIndexOfAnotherStore, and one
// whose checkpoint is no position of this store's history an *ErrIndexPastStore, which the
// caller answers by rebuilding the index or by refusing it.
func (p PlaceIndex) Claim(ctx context.Context) error {
	at, built, err := p.readCheckpoint(ctx)
	if err != nil {
		return err
	}
	store, err := p.store(ctx)
	if err != nil {
		return err
	}
	switch {
	case built != "" && built != store:
		return &ErrIndexOfAnotherStore{Index: built, Store: store}
	case at == eventstore.Position{}:
		return nil // empty: its first batch names the store
	}
	held, err := inHistory(ctx, p.Pool, at)
	if err != nil {
		return err
	}
	if !held {
		return &ErrIndexPastStore{At: at}
	}
	if built == store {
		return nil
	}
	return p.Index.Upsert(ctx, nil, nil, checkpointOf(store, at))
}

// inHistory reports whether at, the end of a range the index applied (always an event's
// position), is a position of this store's history: an event it holds there, or an archived
// range holding the position.
func inHistory(ctx context.Context, pool *pgxpool.Pool, at eventstore.Position) (bool, error) {
	var held bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM events WHERE transaction_id = $1::text::xid8 AND position = $2)
		OR EXISTS (SELECT FROM event_archives WHERE from_position <= $2 AND $2 < to_position)`,
		strconv.FormatUint(at.TxID, 10), at.Pos).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("place index: looking for its checkpoint %v in the store: %w", at, err)
	}
	return held, nil
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
	store, err := p.store(ctx)
	if err != nil {
		return err
	}
	return p.Index.Upsert(ctx, docs, nil, checkpointOf(store, to))
}

// Rebuild fills a new generation of the index from position 0 and swaps it in; readers
// keep the old one until then.
func (p PlaceIndex) Rebuild(ctx context.Context, batchSize int, report func(applied int, at eventstore.Position)) (int, error) {
	total, batchSize := 0, min(batchSize, rebuildBatch)
	store, err := p.store(ctx)
	if err != nil {
		return 0, err
	}
	err = p.Index.Rebuild(ctx, func(w placeindex.Writer) error {
		at, n, err := replay(ctx, p.Pool, p.Name(), eventstore.Position{}, batchSize, p.eventTypes(), eventstore.Position{}, report,
			func(r readAhead) error {
				docs, err := PlaceDocsFromEvents(r.events)
				if err != nil {
					return err
				}
				return w.Upsert(ctx, docs, nil, checkpointOf(store, r.to))
			})
		total = n
		if err != nil {
			return err
		}
		return w.Upsert(ctx, nil, nil, checkpointOf(store, at))
	})
	return total, err
}
