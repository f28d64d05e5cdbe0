package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/demodata"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/app"
	"github.com/kyapi/kyapi/internal/durable"
	"github.com/kyapi/kyapi/projections"
)

func runImport(ctx context.Context, args []string) error {
	fs := newFlags("import", "FILE...   (NDJSON, docs/api.md \"Catalog import\"; - reads standard input)")
	args, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return usageError(fs, "name at least one file")
	}
	_, pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	h := commands.ImportCatalog{Store: eventstore.New(pool), Clock: time.Now}
	// The files are one batch: a bad line in any of them imports nothing of any. A batch may be
	// read again (see HandleBatches): standard input, and any FILE that is not a regular file (a
	// pipe such as bash's <(zcat catalog.ndjson.gz), a FIFO, a device), can be read only once,
	// so they are read once here and kept; a regular file is opened again by its path.
	kept := make([][]byte, len(args))
	var stdin []byte
	for i, name := range args {
		switch {
		case name == "-":
			if stdin == nil {
				if stdin, err = readAllOrStop(ctx, os.Stdin); err != nil {
					return fmt.Errorf("-: %w", err)
				}
			}
			kept[i] = stdin
		default:
			if kept[i], err = readUnlessRegular(ctx, name); err != nil {
				return fmt.Errorf("%w (nothing of any file was imported)", err)
			}
		}
	}
	open := func(i int) (io.ReadCloser, error) {
		if kept[i] != nil {
			return io.NopCloser(bytes.NewReader(kept[i])), nil
		}
		f, err := os.Open(args[i])
		if err != nil {
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{bufio.NewReaderSize(f, 1<<20), f}, nil
	}
	results, err := h.HandleBatches(ctx, len(args), open, eventstore.Metadata{Actor: "cli:import"})
	if err != nil {
		var be *commands.BatchError
		if errors.As(err, &be) {
			return fmt.Errorf("%s: %w (nothing of any file was imported)", args[be.Batch], be.Err)
		}
		return fmt.Errorf("%w (nothing of any file was imported)", err)
	}
	for i, res := range results {
		fmt.Printf("%s: %d towns, %d places, %d events (%d new, %d updated)\n", args[i], res.Towns, res.Places, res.Events, res.Created, res.Updated)
	}
	return nil
}

// readUnlessRegular reads the whole of name when it is not a regular file (a pipe, a FIFO, a
// device), which could not be read a second time, and returns nil for a regular file.
func readUnlessRegular(ctx context.Context, name string) ([]byte, error) {
	st, err := os.Stat(name)
	if err != nil || st.Mode().IsRegular() {
		return nil, err
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readAllOrStop(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// readAllOrStop reads r to its end, or returns ctx's error as soon as ctx ends: a pipe or a
// terminal may be written to slowly or never, and the first signal stops every command
// (docs/operations.md). The read left running ends with the process. What it returns is never
// nil, so that an empty input is told from one not read.
func readAllOrStop(ctx context.Context, r io.Reader) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(r)
		if b == nil {
			b = []byte{}
		}
		done <- result{b, err}
	}()
	select {
	case res := <-done:
		return res.b, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// runRebuild empties every shared read model and replays the store from position 0, then
// rebuilds this process's place index (DATA_DIR or Elasticsearch) into a new generation.
// Run it with the servers stopped, or expect them to serve partial read models meanwhile.
func runRebuild(ctx context.Context, args []string) error {
	fs := newFlags("rebuild", "[-batch N]")
	batch := fs.Int("batch", 10000, "events per transaction (at least 1)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *batch < 1 {
		return usageError(fs, "-batch must be at least 1, got %d", *batch)
	}
	cfg, pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Starting over from position 0 would leave archived events out of every read model.
	if archives, err := eventstore.Archives(ctx, pool); err != nil || len(archives) > 0 {
		if err == nil {
			err = fmt.Errorf("positions %d to %d are archived: restore them first (kyapi restore FILE, newest archive first); nothing was rebuilt",
				archives[0].From, archives[len(archives)-1].To-1)
		}
		return err
	}
	head, err := eventstore.GlobalHead(ctx, pool)
	if err != nil {
		return err
	}
	// Every projection replays the whole store; the catalog and the place index pass over the
	// charges through the events_sparse index. events/s is the store's events over the time.
	total, err := eventstore.TotalEvents(ctx, pool)
	if err != nil {
		return err
	}
	// The place index is opened before anything is rebuilt: when another process holds this
	// DATA_DIR, rebuild stops here, having changed nothing.
	index, err := app.OpenIndex(ctx, cfg)
	if err != nil {
		return fmt.Errorf("place index: %w; nothing was rebuilt", err)
	}
	defer index.Close()
	// A rebuild allocates far more than it keeps (decoded records, rendered rows, the embedded
	// index's analysis): letting the heap grow to five times what is live (GOGC=400) rather
	// than twice cut the catalog's rebuild by a tenth and the place index's by about a fifth,
	// for a peak of about 2 GB at 150,000 places (docs/operations.md). A GOGC the operator set
	// is kept.
	defer app.DefaultGOGC(400)()
	for _, a := range projections.SQLAppliers(time.Now) {
		p := projections.SQL{Pool: pool, Applier: a}
		start := time.Now()
		if _, err := p.Rebuild(ctx, *batch, progressBar(p.Name(), head)); err != nil {
			return err
		}
		finishBar(p.Name(), total, start)
	}
	start := time.Now()
	pi := projections.PlaceIndex{Pool: pool, Index: index}
	if _, err := pi.Rebuild(ctx, *batch, progressBar(pi.Name(), head)); err != nil {
		return err
	}
	finishBar(pi.Name(), total, start)
	fmt.Printf("rebuilt every projection up to %v\n", head)
	return nil
}

// progressBar shows how far through the store a replay is, by position.
func progressBar(name string, head eventstore.Position) func(int, eventstore.Position) {
	return func(_ int, at eventstore.Position) {
		const width = 30
		frac := 1.0
		if head.Pos > 0 {
			frac = min(float64(at.Pos)/float64(head.Pos), 1)
		}
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = ' '
			if float64(i) < frac*width {
				bar[i] = '='
			}
		}
		fmt.Fprintf(os.Stderr, "\r%-12s [%s] %3.0f%% position %d of %d", name, bar, frac*100, at.Pos, head.Pos)
	}
}

// finishBar reports a replay of the store's n events.
func finishBar(name string, n int64, start time.Time) {
	secs := max(time.Since(start).Seconds(), 1e-9)
	fmt.Fprintf(os.Stderr, "\r%-12s %d events in %.2fs (%.0f events/s)%30s\n", name, n, secs, float64(n)/secs, "")
}

// runAudit brings the shared read models up to the store head, then audits the store
// (audit.Run): every chain, every account's fold, the write model and the read models.
// maxAuditWorkers bounds kyapi audit -workers: each worker reads its streams on a pooled
// connection, so more workers than connections only wait, and a typo such as 100000000 would
// start that many goroutines and run the process out of memory.
const maxAuditWorkers = 256

func runAudit(ctx context.Context, args []string) error {
	fs := newFlags("audit", "[-account ID] [-from POS] [-to POS] [-workers N] [-digest FILE [-public-key HEX]]")
	account := fs.String("account", "", "audit this account only")
	from := fs.Int64("from", 0, "audit only events at or after this position")
	to := fs.Int64("to", 0, "audit only events at or before this position (0: the newest)")
	workers := fs.Int("workers", 0, "streams audited at once (default: the number of CPUs)")
	digestFile := fs.String("digest", "", "also verify the store against this digest (kyapi digest -o, or GET /admin/digest)")
	publicKey := fs.String("public-key", "", "with -digest: the operator's public key (hex) the digest must be signed by")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *publicKey != "" && *digestFile == "" {
		return usageError(fs, "-public-key checks the signature of a digest: give the digest with -digest FILE")
	}
	// A range that cannot hold an event audits nothing, and would report a clean store.
	switch {
	case *from < 0 || *to < 0:
		return usageError(fs, "-from and -to are positions in the store: 0 or more (0: unbounded)")
	case *to != 0 && *to < *from:
		return usageError(fs, "-to %d is before -from %d: the range holds no event", *to, *from)
	case *workers < 0 || *workers > maxAuditWorkers:
		return usageError(fs, "-workers must be 1 to %d (0, the default: the number of CPUs), got %d", maxAuditWorkers, *workers)
	}
	var digest *audit.Digest
	if *digestFile != "" {
		d, err := readDigest(*digestFile, *publicKey)
		if err != nil {
			return err
		}
		digest = &d
	}
	cfg, pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	// A read model that cannot apply an event (one whose payload cannot be read, say) stops
	// where it is: the audit still runs, comparing each read model as of its checkpoint, so
	// that it names the event, and the stop counts as a difference.
	stalled := catchUpShared(ctx, pool, cfg)
	if len(stalled) > 0 && ctx.Err() != nil {
		return stalled[0]
	}
	opts := audit.Options{Out: os.Stdout, AccountID: *account, FromPosition: *from, ToPosition: *to, Workers: *workers}
	if isTerminal(os.Stderr) {
		opts.Progress = func(p audit.Progress) {
			rate := float64(p.Events) / max(p.Elapsed.Seconds(), 1e-9)
			eta := "-"
			if rate > 0 && p.Total > p.Events {
				eta = time.Duration(float64(p.Total-p.Events) / rate * float64(time.Second)).Round(time.Second).String()
			}
			fmt.Fprintf(os.Stderr, "\raudit: %d/%d events  %.0f events/s  ETA %s   ", p.Events, p.Total, rate, eta)
		}
	}
	rep, err := audit.Run(ctx, pool, opts)
	if opts.Progress != nil {
		fmt.Fprintln(os.Stderr)
	}
	if err != nil {
		return err
	}
	for _, err := range stalled {
		fmt.Printf("DIFF a read model could not be brought up to the store's head: %v (it was compared as of where it stopped)\n", err)
	}
	if rep.ArchivedBefore > 0 {
		fmt.Printf("history before position %d is archived (%d events): every stream was audited from its archived boundary state\n",
			rep.ArchivedBefore, rep.ArchivedEvents)
	}
	differences := len(rep.Differences) + len(stalled)
	fmt.Printf("audited %d accounts, %d streams, %d events: %d differences\n", rep.Accounts, rep.Streams, rep.Events, differences)
	if digest != nil {
		drep, err := audit.VerifyDigest(ctx, pool, *digest, *workers)
		if err != nil {
			return err
		}
		for _, d := range drep.Differences {
			fmt.Println("DIGEST", d)
		}
		fmt.Printf("verified %d events of %d streams against the digest of %s (position %d, root %s): %d differences\n",
			drep.Events, drep.Streams, digest.TakenAt.Format(time.RFC3339), digest.Position, digest.Root, len(drep.Differences))
		differences += len(drep.Differences)
	}
	if differences > 0 {
		return exitCode(1)
	}
	return nil
}

// readDigest reads and checks a digest document; with publicKey, it must be signed by it.
func readDigest(path, publicKey string) (audit.Digest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return audit.Digest{}, err
	}
	d, err := audit.ParseDigest(b)
	if err != nil {
		return d, fmt.Errorf("%s: %w", path, err)
	}
	var trusted ed25519.PublicKey
	if publicKey != "" {
		if trusted, err = audit.ParsePublicKey(publicKey); err != nil {
			return d, fmt.Errorf("-public-key: %w", err)
		}
	} else {
		fmt.Fprintf(os.Stderr, "audit: the digest is signed by key %s; pass -public-key to require the operator's key\n", d.PublicKey)
	}
	if err := audit.CheckDigest(d, trusted); err != nil {
		return d, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// runDigest takes a signed digest of the store (audit.TakeDigest), saves it for GET
// /admin/digest and writes it to -o; -new-key makes a signing key instead.
func runDigest(ctx context.Context, args []string) error {
	fs := newFlags("digest", "-o FILE | kyapi digest -new-key FILE")
	out := fs.String("o", "", "write the digest to this file (- for standard output)")
	newKey := fs.String("new-key", "", "make a signing key in this file and print its public key")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *newKey != "" && *out != "" {
		return usageError(fs, "give -o FILE or -new-key FILE, not both")
	}
	if *newKey != "" {
		pub, err := audit.NewSigningKey(*newKey)
		if err != nil {
			return err
		}
		fmt.Printf("wrote the signing key to %s (keep it secret; AUDIT_SIGNING_KEY names it)\npublic key: %x\n", *newKey, []byte(pub))
		return nil
	}
	if *out == "" {
		return usageError(fs, "give -o FILE (or -new-key FILE)")
	}
	cfg, err := app.LoadConfig()
	if err != nil {
		return err
	}
	if cfg.AuditSigningKey == "" {
		return fmt.Errorf("AUDIT_SIGNING_KEY is not set: name the key file (kyapi digest -new-key FILE makes one)")
	}
	key, err := audit.LoadSigningKey(cfg.AuditSigningKey)
	if err != nil {
		return fmt.Errorf("AUDIT_SIGNING_KEY: %w", err)
	}
	// The digest replaces -o whole; the key is never replaced (docs/operations.md, "Keys"),
	// whatever name -o gives it.
	if *out != "-" {
		if o, err := os.Stat(*out); err == nil {
			if k, err := os.Stat(cfg.AuditSigningKey); err == nil && os.SameFile(o, k) {
				return usageError(fs, "-o %s is the signing key (AUDIT_SIGNING_KEY): a digest is never written over it; name another file", *out)
			}
		}
	}
	pool, err := app.OpenDB(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := audit.TakeDigest(ctx, pool, key, time.Now())
	if err != nil {
		return err
	}
	if err := audit.SaveDigest(ctx, pool, d); err != nil {
		return err
	}
	doc, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	doc = append(doc, '\n')
	if *out == "-" {
		_, err = os.Stdout.Write(doc)
		return err
	}
	// Whole or not at all: a digest an auditor already keeps under that name is replaced only
	// by a complete one.
	if err := durable.WriteFile(*out, doc, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "digest of %d streams, %d events up to position %d: root %s, written to %s\n", d.Streams, d.Events, d.Position, d.Root, *out)
	return nil
}

// isTerminal reports whether f is a terminal, where a progress line can rewrite itself.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// catchUpShared brings each shared read model up to the store's head, and returns the errors of
// those that could not be (one that fails does not keep the others where they are); the first
// error alone when ctx ended.
func catchUpShared(ctx context.Context, pool *pgxpool.Pool, cfg app.Config) []error {
	var errs []error
	for _, a := range projections.SQLAppliers(time.Now) {
		if _, err := projections.CatchUp(ctx, pool, projections.SQL{Pool: pool, Applier: a}, 5000, nil); err != nil {
			if ctx.Err() != nil {
				return []error{err}
			}
			errs = append(errs, err)
		}
	}
	return errs
}

// Demo account identity: make run finds it again on the next start.
const (
	demoEmail      = "demo@kyapi.example"
	demoPaymentRef = "demo-initial-credit"
	demoCents      = 5000 // $50 = 10,000 credits
)

func runDemoData(ctx context.Context, args []string) error {
	fs := newFlags("demo-data", "[-places N]")
	places := fs.Int("places", demodata.DefaultPlaces, "number of places (at least 1)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// The demo catalog is imported as one batch, towns and events included.
	if most := domain.MaxImportRecords - len(demodata.Towns()) - demodata.EventCount; *places < 1 || *places > most {
		return usageError(fs, "-places must be from 1 to %d (the demo catalog is one import batch), got %d", most, *places)
	}
	cfg, pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := eventstore.New(pool)
	if err := loadDemoCatalog(ctx, store, *places); err != nil {
		return err
	}
	accounts := commands.Accounts{Store: store, Clock: time.Now}
	meta := eventstore.Metadata{Actor: "cli:demo-data"}
	var accountID string
	err = pool.QueryRow(ctx, `SELECT account_id FROM accounts WHERE email = $1 ORDER BY opened_at LIMIT 1`, demoEmail).Scan(&accountID)
	if err != nil {
		if accountID, err = accounts.OpenAccount(ctx, "Demo Account", demoEmail, meta); err != nil {
			return err
		}
	}
	if _, err := accounts.Purchase(ctx, accountID, demoCents, demoPaymentRef, meta); err != nil {
		return err
	}
	key, err := accounts.IssueKey(ctx, accountID, meta)
	if err != nil {
		return err
	}
	var balance int64
	_ = pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE account_id = $1`, accountID).Scan(&balance)
	base := localURL(cfg.ReadAddr, cfg.TLSCertFile != "")
	fmt.Printf(`
Demo account %s has %d credits.
Demo API key (shown once; a new one is issued on every demo-data run):

  %s

Try it once the server is up:

  curl -H "Authorization: Bearer %s" "%s/api/data/places?town=lexington&limit=3"

`, accountID, balance, key.APIKey, key.APIKey, base)
	return nil
}

// localURL is the base URL a client on this machine reaches the read API at, listening on
// addr (READ_ADDR): a wildcard or empty host is localhost.
func localURL(addr string, tls bool) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return scheme + "://" + addr
	}
	if app.WildcardHost(host) {
		host = "localhost"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
