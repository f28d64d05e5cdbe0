// Command kyapi runs the Kentucky Business Data API: the public read API, the admin API
// and the projections (serve), and the operator tools (migrate, import, demo-data,
// rebuild, audit). Configuration comes from the environment; see README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/migrations"
)

const usage = `usage: kyapi <command> [flags]

commands:
  serve       run the read API, the admin API and the projections (flags select some)
  migrate     apply database migrations
  import      import catalog NDJSON files: kyapi import FILE...
  demo-data   load the deterministic Kentucky demo catalog and a demo account
  rebuild     rebuild every projection from position 0
  audit       replay every account's ledger and compare it with the read models
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
		err = runAudit(ctx)
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

func newLogger(level string) *logrus.Logger {
	log := logrus.New()
	log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	if l, err := logrus.ParseLevel(level); err == nil {
		log.SetLevel(l)
	}
	return log
}

// connect reads the configuration and opens the database on the current schema.
func connect(ctx context.Context) (config, *pgxpool.Pool, error) {
	cfg, err := loadConfig()
	if err != nil {
		return cfg, nil, err
	}
	pool, err := openDB(ctx, cfg)
	return cfg, pool, err
}

// openDB connects and applies migrations, so every command runs on the current schema.
func openDB(ctx context.Context, cfg config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if pcfg.MaxConns < 16 {
		pcfg.MaxConns = 16
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL: %w", err)
	}
	if _, err := migrations.Apply(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func runMigrate(ctx context.Context) error {
	cfg, err := loadConfig()
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
