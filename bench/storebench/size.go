package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/kyapi/kyapi/eventstore"
)

// sizeSnapshot is the database's size at one moment, after a CHECKPOINT with every
// projection caught up.
type sizeSnapshot struct {
	Label         string      `json:"label"`
	At            time.Time   `json:"at"`
	DatabaseBytes int64       `json:"database_bytes"`
	Events        int64       `json:"events"` // every event in the store
	Tables        []tableSize `json:"tables"`
	CatchUpError  string      `json:"catch_up_error,omitempty"`
	// ChargeEvents and ChargeRowBytes are the charge events in the store and their rows'
	// average size by their columns (pg_column_size of the whole row, tuple header
	// included): what a charge event occupies in a page, whatever free space it went into.
	ChargeEvents   int64   `json:"charge_events"`
	ChargeRowBytes float64 `json:"charge_row_bytes"`
}

// tableSize is one table's heap (with TOAST, free space and visibility maps) and its indexes;
// the partitions of events are summed into one row named events.
type tableSize struct {
	Name       string `json:"name"`
	TableBytes int64  `json:"table_bytes"`
	IndexBytes int64  `json:"index_bytes"`
	Partitions int    `json:"partitions,omitempty"`
}

func runSize(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("size", flag.ContinueOnError)
	label := fs.String("label", "", "name of the snapshot")
	out := fs.String("out", "-", "JSON file to write")
	wait := fs.Duration("wait", 10*time.Minute, "longest wait for the projections to catch up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	s := sizeSnapshot{Label: *label}
	if err := caughtUp(ctx, pool, *wait); err != nil {
		s.CatchUpError = err.Error() // measured anyway; the report says so
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return err
	}
	s.At = time.Now().UTC()
	if err := pool.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&s.DatabaseBytes); err != nil {
		return err
	}
	if s.Events, err = eventstore.TotalEvents(ctx, pool); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(avg(pg_column_size(e.*)), 0)::float8 FROM events e
		WHERE e.type IN ('RequestCharged', 'RequestDeduplicated')`).Scan(&s.ChargeEvents, &s.ChargeRowBytes); err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `
		SELECT coalesce(p.relname, c.relname)::text AS name, sum(pg_table_size(c.oid))::bigint, sum(pg_indexes_size(c.oid))::bigint,
		       count(p.relname)::int
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
		LEFT JOIN pg_class p ON p.oid = i.inhparent
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')
		GROUP BY 1 ORDER BY 2 + 3 DESC`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var t tableSize
		if err := rows.Scan(&t.Name, &t.TableBytes, &t.IndexBytes, &t.Partitions); err != nil {
			return err
		}
		s.Tables = append(s.Tables, t)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fmt.Printf("size %s: database %d bytes, %d events\n", s.Label, s.DatabaseBytes, s.Events)
	return writeJSON(*out, s)
}
