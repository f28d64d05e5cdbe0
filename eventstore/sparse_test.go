package eventstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// The events_sparse index (migration 0017) leaves out exactly the metered requests.
func TestTheDenseTypesAreTheMeteredRequests(t *testing.T) {
	want := []string{domain.EventRequestCharged, domain.EventRequestDeduplicated}
	if !slices.Equal(eventstore.DenseTypes, want) {
		t.Fatalf("DenseTypes %v, metered requests %v", eventstore.DenseTypes, want)
	}
	var def string
	if err := pgtest.NewPool(t).QueryRow(context.Background(),
		`SELECT pg_get_indexdef('events_sparse'::regclass)`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	for _, typ := range want {
		if !strings.Contains(def, fmt.Sprintf("'%s'::text", typ)) {
			t.Fatalf("events_sparse does not leave out %s: %s", typ, def)
		}
	}
}

// A reader of places only (the place index, the catalog) finds its ranges and reads them
// through events_sparse: it gets every place, in order, and its ranges end past the charges,
// so that its checkpoint reaches the head; it never reads a charge.
func TestAReaderOfSparseTypesPassesOverTheChargesThroughTheSparseIndex(t *testing.T) {
	ctx := context.Background()
	store := eventstore.New(pgtest.NewPool(t))
	place := func(i int) { appendTo(t, store, fmt.Sprintf("place-%d", i), at, event("PlaceImported", i)) }
	charges := func(n int) {
		batch := make([]eventstore.NewEvent, n)
		for i := range batch {
			batch[i] = event("RequestCharged", i)
		}
		appendTo(t, store, "account-a", at, batch...)
	}
	for i := range 5 {
		place(i)
	}
	charges(3000)
	for i := 5; i < 8; i++ {
		place(i)
	}
	charges(100)
	if _, err := store.Pool.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	// A reader passes only events no transaction still running can precede, and the
	// transactions of the whole cluster count (other tests' databases too): once every one
	// running now has ended, the ranges below are cut by the batch size alone.
	if _, err := eventstore.SettledPosition(ctx, store.Pool); err != nil {
		t.Fatal(err)
	}
	head, err := eventstore.GlobalHead(ctx, store.Pool)
	if err != nil {
		t.Fatal(err)
	}
	types := []string{"PlaceImported"}

	var at eventstore.Position
	var read []string
	var counts []int
	for range 10 {
		end, n, err := eventstore.NextBatchOf(ctx, store.Pool, at, 4, types)
		if err != nil {
			t.Fatal(err)
		}
		if !at.Less(end) {
			break
		}
		events, err := eventstore.ReadRangeOf(ctx, store.Pool, nil, at, end, types...)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != n {
			t.Fatalf("range (%v, %v]: NextBatchOf counted %d places, the read found %d", at, end, n, len(events))
		}
		for _, e := range events {
			read = append(read, e.StreamID)
		}
		counts = append(counts, n)
		at = end
	}
	want := []string{"place-0", "place-1", "place-2", "place-3", "place-4", "place-5", "place-6", "place-7"}
	if !slices.Equal(read, want) {
		t.Fatalf("read %v, want %v", read, want)
	}
	// Four places, four places, then a range of the last 100 charges alone, ending at the head.
	if !slices.Equal(counts, []int{4, 4, 0}) || at != head {
		t.Fatalf("ranges of %v places ending at %v; head %v", counts, at, head)
	}

	sparse := sparseIndexes(t, store)
	for mode, plan := range explainModes(t, store, eventstore.SparseRangeSQL, "text, bigint, text, bigint, text[]",
		fmt.Sprintf(`'0', 0, '%d', %d, '{PlaceImported}'`, head.TxID, head.Pos)) {
		used := plan.Plan.indexes()
		if len(used) == 0 || slices.ContainsFunc(used, func(ix string) bool { return !slices.Contains(sparse, ix) }) {
			t.Fatalf("%s: the sparse range read does not go through events_sparse:\n%s", mode, plan.JSON)
		}
	}
}

// sparseIndexes are the names of events_sparse's indexes on the partitions.
func sparseIndexes(t *testing.T, store *eventstore.Store) []string {
	t.Helper()
	rows, err := store.Pool.Query(context.Background(),
		`SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'events_sparse'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) == 0 {
		t.Fatalf("events_sparse has no partition indexes: %v %v", names, err)
	}
	return names
}
