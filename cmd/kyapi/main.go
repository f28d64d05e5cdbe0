// Command kyapi runs the Kentucky Business Data API: the public read API, the admin API
// and the projections (serve), and the operator tools (migrate, import, demo-data,
// rebuild, audit, digest, archive, restore). Configuration comes from the environment; see README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/internal/app"
	"github.com/kyapi/kyapi/migrations"
)

const usage = `usage: kyapi <command> [flags]

commands:
  serve       run the read API, the admin API and the projections (flags select some)
  migrate     apply database migrations
  import      import catalog NDJSON files: kyapi import FILE...
  demo-data   load the deterministic Kentucky demo catalog and a demo account
  rebuild     rebuild every projection from position 0
  audit       check every stream's hash chain and every account's ledger against the write and read models;
              -digest FILE also verifies the store against a digest taken earlier
  digest      write a signed digest of the store: kyapi digest -o FILE (key: AUDIT_SIGNING_KEY);
              kyapi digest -new-key FILE makes a signing key
  archive     move the event partitions below a position to a file: kyapi archive -before POSITION -o FILE (-list)
  restore     check an archive file and put its events back: kyapi restore FILE
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "serve":
		err = runServe(ctx, args)
	case "migrate":
		err = runMigrate(ctx)
	case "import":
		err = runImport(ctx, args)
	case "demo-data":
		err = runDemoData(ctx, args)
	case "rebuild":
		err = runRebuild(ctx, args)
	case "audit":
		err = runAudit(ctx, args)
	case "digest":
		err = runDigest(ctx, args)
	case "archive":
		err = runArchive(ctx, args)
	case "restore":
		err = runRestore(ctx, args)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "kyapi: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	var exit exitCode
	if errors.As(err, &exit) {
		os.Exit(int(exit))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kyapi "+cmd+":", err)
		os.Exit(1)
	}
}

// exitCode ends the process with a status and no further message.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// connect reads the configuration and opens the database on the current schema.
func connect(ctx context.Context) (app.Config, *pgxpool.Pool, error) {
	cfg, err := app.LoadConfig()
	if err != nil {
		return cfg, nil, err
	}
	pool, err := app.OpenDB(ctx, cfg)
	return cfg, pool, err
}

func runMigrate(ctx context.Context) error {
	cfg, err := app.LoadConfig()
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := migrations.Apply(ctx, pool)
	for _, name := range applied {
		fmt.Println("applied", name)
	}
	if err == nil && len(applied) == 0 {
		fmt.Println("schema is up to date")
	}
	return err
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		return exitCode(2)
	}
	return nil
}
