package main

import (
	"context"
	"testing"

	"github.com/kyapi/kyapi/eventstore"
)

// The demo catalog is deterministic whatever the database held before: a place imported by
// an operator does not stop demo-data from loading its own towns and places, and a second
// run, finding every demo place there, appends nothing.
func TestDemoDataLoadsItsCatalogBesideOtherPlacesAndOnlyOnce(t *testing.T) {
	_, pool, write := importSetup(t)
	f := write("own.ndjson", `{"record":"place","place_id":"p1","name":"Byte Cafe","category":"food.cafe"}`+"\n")
	if err := runImport(context.Background(), []string{f}); err != nil {
		t.Fatal(err)
	}
	store := eventstore.New(pool)
	if err := loadDemoCatalog(context.Background(), store, 50); err != nil {
		t.Fatal(err)
	}
	var places int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM streams WHERE stream_id LIKE 'place-%' AND version > 0`).Scan(&places); err != nil {
		t.Fatal(err)
	}
	if places != 51 {
		t.Fatalf("%d places after demo-data -places 50 on a database holding one other place; want 51", places)
	}
	before := catalogEvents(t, pool)
	if err := loadDemoCatalog(context.Background(), store, 50); err != nil {
		t.Fatal(err)
	}
	if after := catalogEvents(t, pool); after != before {
		t.Fatalf("a second demo-data run appended %d catalog events; want none, the demo catalog is there", after-before)
	}
}
