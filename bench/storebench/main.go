// Command storebench is the part of `make bench` that writes to and measures the database
// directly (bench/run.sh calls it; docs/benchmarks.md shows what it measured):
//
//	storebench size -label before -out before.json
//	    wait for every projection to catch up, CHECKPOINT, then the database's size and each
//	    table's (heap and indexes): the bytes a metered request costs are the difference of two
//	    of these divided by the requests served between them.
//	storebench accounts -n 100000
//	    open accounts with one usable key each, in bulk: the same rows and events the account
//	    commands write (AccountOpened, KeyIssued), a thousand accounts a transaction, appended
//	    with the event store's own append (eventstore.Batch).
//	storebench grant-check -outage ID -out grant-check.json
//	    whether a bonus grant credited every eligible account exactly once, and nothing else.
//	storebench day -keys keys.txt -places places.tsv (-charges 2500000 | -claims 3400000) -out day.json
//	    a busy day of the paying accounts: each charged for thousands of distinct places through
//	    commands.Meter, so that a serving process must hold millions of dedup claims of the day
//	    (-claims: as many as bring the day's claims, earlier traffic's included, to about that).
//	storebench growth -sizes 10000,100000,1000000,10000000 -out growth.json
//	    one account's history grown to each size in bulk through eventstore.Batch, and at each
//	    size the admin reads (over HTTP) and `kyapi audit` timed.
//
// It is a benchmark tool: it writes only to the database of DATABASE_URL, which bench/run.sh
// points at its own kyapi_bench database.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/eventstore"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: storebench size|accounts|grant-check|day|growth [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmds := map[string]func(context.Context, []string) error{
		"size": runSize, "accounts": runAccounts, "grant-check": runGrantCheck, "day": runDay, "growth": runGrowth,
	}
	cmd, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "storebench: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	if err := cmd(ctx, os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "storebench:", err)
		os.Exit(1)
	}
}

func connect(ctx context.Context) (*pgxpool.Pool, error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return nil, errors.New("DATABASE_URL is not set")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["jit"] = "off" // as the service's own connections (app.OpenDB)
	return pgxpool.NewWithConfig(ctx, cfg)
}

func writeJSON(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if name == "" || name == "-" {
		_, err = os.Stdout.Write(append(b, '\n'))
		return err
	}
	return os.WriteFile(name, append(b, '\n'), 0o644)
}

// caughtUp waits until every projection's checkpoint has reached the newest committed event,
// polling; it gives up after limit and says how far behind the slowest one still was.
func caughtUp(ctx context.Context, pool *pgxpool.Pool, limit time.Duration) error {
	head, err := eventstore.GlobalHead(ctx, pool)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(limit)
	for {
		var behind []string
		rows, err := pool.Query(ctx, `SELECT name FROM projection_checkpoints
			WHERE (transaction_id, position) < ($1::text::xid8, $2) ORDER BY name`, strconv.FormatUint(head.TxID, 10), head.Pos)
		if err == nil {
			for rows.Next() {
				var n string
				if err = rows.Scan(&n); err != nil {
					break
				}
				behind = append(behind, n)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			return err
		}
		if len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("projections %v still behind position %s after %s", behind, head, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
