package projections_test

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// Two imports of the same place commit so that the newer version (2) has the lower transaction
// id: `kyapi import a.ndjson b.ndjson` locks a town's stream for its first file (its transaction
// takes its id), and while it reads its second file an admin import of the place commits
// version 1; the first import then appends version 2. Global order delivers v2 before v1.
// A place index fed in ranges that split them keeps v2, as the catalog tables and a rebuild
// do: its documents carry their stream version (placeindex.Doc.Version).
func TestThePlaceIndexKeepsTheNewestVersionWhenRangesSplitAnInvertedPair(t *testing.T) {
	pool := pgtest.NewPool(t)
	imp := commands.ImportCatalog{Store: eventstore.New(pool), Clock: func() time.Time { return catalogNow }}

	reached, release := make(chan struct{}), make(chan struct{})
	files := []string{
		`{"record":"place","place_id":"plc_other","name":"Other Place","category":"food"}`,
		`{"record":"place","place_id":"plc_x","name":"Zebra Newest","category":"food"}`,
	}
	done := make(chan error, 1)
	go func() {
		_, err := imp.HandleBatches(bg, 2, func(i int) (io.ReadCloser, error) {
			if i == 1 {
				close(reached) // file 0 is appended: this transaction has its id
				<-release
			}
			return io.NopCloser(strings.NewReader(files[i])), nil
		}, eventstore.Metadata{})
		done <- err
	}()
	<-reached
	if _, err := imp.Handle(bg, strings.NewReader(`{"record":"place","place_id":"plc_x","name":"Yak Oldest","category":"food"}`), eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Precondition: version 2 has the lower transaction id.
	var v1tx, v2tx uint64
	if err := pool.QueryRow(bg, `SELECT
			(SELECT transaction_id::text::bigint FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = 'place-plc_x' AND e.version = 1),
			(SELECT transaction_id::text::bigint FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = 'place-plc_x' AND e.version = 2)`).Scan(&v1tx, &v2tx); err != nil {
		t.Fatal(err)
	}
	if !(v2tx < v1tx) {
		t.Fatalf("setup: v1 tx %d, v2 tx %d; want v2's lower", v1tx, v2tx)
	}
	waitVisible(t, pool)

	// The catalog tables: version 2 wins whatever the batches.
	cat := projections.SQL{Pool: pool, Applier: projections.Catalog{Clock: func() time.Time { return catalogNow }}}
	if _, err := projections.CatchUp(bg, pool, cat, 2, nil); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := pool.QueryRow(bg, `SELECT name FROM rm_places WHERE place_id = 'plc_x'`).Scan(&name); err != nil || name != "Zebra Newest" {
		t.Fatalf("catalog: %q %v", name, err)
	}

	caught := projections.PlaceIndex{Pool: pool, Index: newIndex(t)}
	if _, err := projections.CatchUp(bg, pool, caught, 2, nil); err != nil { // ranges: (0, v2], (v2, v1]
		t.Fatal(err)
	}
	rebuilt := projections.PlaceIndex{Pool: pool, Index: newIndex(t)}
	if _, err := rebuilt.Rebuild(bg, 1000, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"zebra", "yak"} {
		want, err1 := rebuilt.Index.List(bg, placeindex.ListQuery{Q: q})
		got, err2 := caught.Index.List(bg, placeindex.ListQuery{Q: q})
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("q=%q: the index caught up in batches answers %+v, a rebuild (and rm_places: %q) %+v", q, got, name, want)
		}
	}
}
