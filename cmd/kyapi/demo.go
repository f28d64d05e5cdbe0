package main

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/demodata"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// loadDemoCatalog imports the demo catalog unless every one of its places is already in the
// store, so restarting make run does not re-import 20,000 places, and places an operator
// imported do not keep the demo catalog out.
func loadDemoCatalog(ctx context.Context, store *eventstore.Store, places int) error {
	var buf bytes.Buffer
	today := time.Now().UTC().Truncate(24 * time.Hour)
	stats, err := demodata.Write(&buf, demodata.Config{Places: places, Today: today})
	if err != nil {
		return err
	}
	streams := make([]string, len(stats.PlaceIDs))
	for i, id := range stats.PlaceIDs {
		streams[i] = domain.PlaceStream(id)
	}
	there, err := eventstore.StreamsWritten(ctx, store.Pool, streams)
	if err != nil {
		return err
	}
	if there == len(streams) {
		fmt.Printf("demo catalog already loaded (its %d places are there); skipping its import\n", there)
		return nil
	}
	start := time.Now()
	res, err := commands.ImportCatalog{Store: store, Clock: time.Now}.Handle(ctx, &buf, eventstore.Metadata{Actor: "cli:demo-data"})
	if err != nil {
		return err
	}
	fmt.Printf("demo catalog: %d towns, %d places (%d menus, %d review summaries), %d events imported in %.1fs\n",
		res.Towns, res.Places, stats.Menus, stats.Reviews, res.Events, time.Since(start).Seconds())
	return nil
}
