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

// loadDemoCatalog imports the demo catalog once: a database that already holds places is
// left as it is, so restarting make run does not re-import 20,000 places.
func loadDemoCatalog(ctx context.Context, store *eventstore.Store, places int) error {
	loaded, err := eventstore.AnyStream(ctx, store.Pool, domain.PlaceStream(""))
	if err != nil {
		return err
	}
	if loaded {
		fmt.Println("catalog already loaded; skipping the demo catalog import")
		return nil
	}
	var buf bytes.Buffer
	today := time.Now().UTC().Truncate(24 * time.Hour)
	stats, err := demodata.Write(&buf, demodata.Config{Places: places, Today: today})
	if err != nil {
		return err
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
