package projections_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// listIDs is the place list of idx, ids only.
func listIDs(t *testing.T, idx placeindex.Index) string {
	t.Helper()
	res, err := idx.List(bg, placeindex.ListQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range res.Hits {
		ids = append(ids, h.PlaceID)
	}
	return strings.Join(ids, " ")
}

// A place index's checkpoint is a position in the store it was fed from. Fed from another
// store, the index is refused rather than read as that store's (which would skip every event
// of it below the position, silently); rebuilt from that store, it is its.
func TestAPlaceIndexFedFromOneStoreIsNotTakenByAnother(t *testing.T) {
	poolA, poolB := pgtest.NewPool(t), pgtest.NewPool(t)
	catalogImport(t, poolB, []byte(`{"record":"place","place_id":"p-b","name":"Berea Books","category":"shopping.books"}`))
	catalogImport(t, poolA, []byte(`{"record":"place","place_id":"p-a","name":"Ashland Diner","category":"food.diner"}`))
	idx := newIndex(t)
	if _, err := projections.CatchUp(bg, poolA, projections.PlaceIndex{Pool: poolA, Index: idx}, 100, nil); err != nil {
		t.Fatal(err)
	}

	b := projections.PlaceIndex{Pool: poolB, Index: idx}
	var other *projections.ErrIndexOfAnotherStore
	if _, err := b.Checkpoint(bg); !errors.As(err, &other) {
		t.Errorf("Checkpoint of an index fed from another store = %v, want an ErrIndexOfAnotherStore", err)
	}
	if err := b.Claim(bg); !errors.As(err, &other) {
		t.Errorf("Claim of an index fed from another store = %v, want an ErrIndexOfAnotherStore", err)
	}
	if _, err := projections.CatchUp(bg, poolB, b, 100, nil); err == nil {
		t.Errorf("a catch-up from another store into the index succeeded (index holds %q)", listIDs(t, idx))
	}

	if _, err := b.Rebuild(bg, 100, nil); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	if err := b.Claim(bg); err != nil {
		t.Errorf("Claim after a rebuild from this store: %v", err)
	}
	if got := listIDs(t, idx); got != "p-b" {
		t.Errorf("index rebuilt from store B lists %q, want p-b", got)
	}
}

// An index written before checkpoints named their store (a position alone) keeps working
// without a rebuild: it is taken as this store's, and its checkpoint names the store from then on.
func TestAPlaceIndexWhoseCheckpointNamesNoStoreIsTakenAsThisStoresAndNamesIt(t *testing.T) {
	pool := pgtest.NewPool(t)
	catalogImport(t, pool, []byte(`{"record":"place","place_id":"p-1","name":"Old Index Diner","category":"food.diner"}`))
	idx := newIndex(t)
	pi := projections.PlaceIndex{Pool: pool, Index: idx}
	at, err := projections.CatchUp(bg, pool, pi, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	head, err := pi.Checkpoint(bg)
	if err != nil || at == 0 {
		t.Fatalf("Checkpoint = %v, %v after %d events", head, err, at)
	}
	if err := idx.Upsert(bg, nil, nil, head.String()); err != nil { // as an earlier version left it
		t.Fatal(err)
	}

	if got, err := pi.Checkpoint(bg); err != nil || got != head {
		t.Errorf("Checkpoint of an index that names no store = %v, %v; want %v", got, err, head)
	}
	if err := pi.Claim(bg); err != nil {
		t.Fatalf("Claim of an index that names no store: %v", err)
	}
	store, err := eventstore.StoreID(bg, pool)
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := idx.Checkpoint(bg); err != nil || !strings.Contains(cp, store) || !strings.HasPrefix(cp, head.String()) {
		t.Errorf("the claimed index's checkpoint = %q, %v; want position %v naming store %s", cp, err, head, store)
	}
	if got, err := pi.Checkpoint(bg); err != nil || got != head {
		t.Errorf("Checkpoint after the claim = %v, %v; want %v", got, err, head)
	}
	if got := listIDs(t, idx); got != "p-1" {
		t.Errorf("the claimed index lists %q, want p-1 as before", got)
	}
	other := projections.PlaceIndex{Pool: pgtest.NewPool(t), Index: idx}
	var e *projections.ErrIndexOfAnotherStore
	if err := other.Claim(bg); !errors.As(err, &e) {
		t.Errorf("another store's Claim of the claimed index = %v, want an ErrIndexOfAnotherStore", err)
	}
}

// An index whose checkpoint names this store (or none) but is no position of its history was
// fed from a copy of the database that went on past it: it is refused, for the caller to
// rebuild (docs/operations.md, "The place index and its event store"), not taken as it is.
func TestAPlaceIndexPastItsStoresHistoryIsNotTaken(t *testing.T) {
	pool := pgtest.NewPool(t)
	catalogImport(t, pool, []byte(`{"record":"place","place_id":"p-1","name":"Ashland Diner","category":"food.diner"}`))
	idx := newIndex(t)
	pi := projections.PlaceIndex{Pool: pool, Index: idx}
	if _, err := projections.CatchUp(bg, pool, pi, 100, nil); err != nil {
		t.Fatal(err)
	}
	if err := pi.Claim(bg); err != nil {
		t.Fatalf("Claim of an index fed from this store: %v", err)
	}
	at, err := pi.Checkpoint(bg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := eventstore.StoreID(bg, pool)
	if err != nil {
		t.Fatal(err)
	}
	past := eventstore.Position{TxID: at.TxID + 1000, Pos: at.Pos + 1000}
	for _, cp := range []string{past.String() + " store=" + store, past.String()} {
		if err := idx.Upsert(bg, nil, nil, cp); err != nil {
			t.Fatal(err)
		}
		var e *projections.ErrIndexPastStore
		if err := pi.Claim(bg); !errors.As(err, &e) || e.At != past {
			t.Errorf("Claim of an index whose checkpoint %q this store does not hold = %v, want an ErrIndexPastStore at %v", cp, err, past)
		}
	}
}
