// Command kyapi runs the Kentucky Business Data API: the public read API, the admin API
// and the projections (serve), and the operator tools (migrate, import, demo-data,
// rebuild, audit, digest, archive, restore). Configuration comes from the environment; see README.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
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

Flags go before any other argument. kyapi COMMAND -h shows a command's flags.
Configuration comes from the environment (README.md, "Configuration").
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first SIGINT or SIGTERM asks the command to stop (serve shuts down gracefully); then
	// the signals' default action is back, so a second one ends the process at once.
	go func() {
		<-ctx.Done()
		stop()
	}()
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "serve":
		err = runServe(ctx, args)
	case "migrate":
		err = runMigrate(ctx, args)
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

func runMigrate(ctx context.Context, args []string) error {
	if err := parseFlags(newFlags("migrate", ""), args); err != nil {
		return err
	}
	cfg, err := app.LoadConfig()
	if err != nil {
		return err
	}
	pool, err := app.OpenPool(ctx, cfg)
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

// newFlags is the flag set of a command; its usage (-h) shows synopsis and the flags.
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), strings.TrimSpace("usage: kyapi "+name+" "+synopsis))
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(fs.Output(), "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses the arguments of a command that takes flags only: any other word is a
// usage error. (Go's flag package stops at the first word that is not a flag, so without
// this check `kyapi serve extra -read=false` would quietly drop -read=false.)
func parseFlags(fs *flag.FlagSet, args []string) error {
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError(fs, "unexpected argument %q: kyapi %s takes no arguments besides its flags", rest[0], fs.Name())
	}
	return nil
}

// parseArgs parses the flags of a command that takes positional arguments and returns
// those. A word that looks like a flag after them would not be read as one, so it is a
// usage error: flags go first (after "--", every word is an argument).
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	rest, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
		return rest, nil
	}
	for _, a := range rest {
		if len(a) > 1 && a[0] == '-' {
			return nil, usageError(fs, "%q after the arguments is not read as a flag: put flags before the arguments (or a file named so after --)", a)
		}
	}
	return rest, nil
}

// parse parses fs's flags from args and returns the words after them. -h prints the usage
// on standard output and ends the process with status 0; a mistake, status 2.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	// The flag package writes its message and the usage before Parse returns; they go to
	// standard output for -h and to standard error for a mistake.
	var out bytes.Buffer
	fs.SetOutput(&out)
	err := fs.Parse(args)
	fs.SetOutput(os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = os.Stdout.Write(out.Bytes())
		return nil, exitCode(0)
	}
	if err != nil {
		_, _ = os.Stderr.Write(out.Bytes())
		return nil, exitCode(2)
	}
	return fs.Args(), nil
}

// usageError prints a usage mistake and the command's usage on standard error and ends the
// process with status 2, as the flag package's own errors do.
func usageError(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(os.Stderr, "kyapi %s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.SetOutput(os.Stderr)
	fs.Usage()
	return exitCode(2)
}
