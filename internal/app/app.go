// Package app wires the service together: the database, the event store, the projections,
// the meter, the read and admin APIs and their HTTP servers. `kyapi serve` and the benchmark
// servers under bench/ call the same Serve, so a benchmark measures exactly what is served.
package app

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/adminapi"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/console"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/internal/metrics"
	"github.com/kyapi/kyapi/migrations"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
	"github.com/kyapi/kyapi/projections/placeindex/elasticindex"
	"github.com/kyapi/kyapi/ratelimit"
	"github.com/kyapi/kyapi/readapi"
)

// NewLogger is the service's JSON logger at the given level.
func NewLogger(level string) *logrus.Logger {
	log := logrus.New()
	log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	if l, err := logrus.ParseLevel(level); err == nil {
		log.SetLevel(l)
	}
	return log
}

// OpenDB connects (OpenPool) and applies migrations, so every command runs on the current
// schema.
func OpenDB(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pool, err := OpenPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Apply(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// OpenPool opens the database with the service's session settings, and fails if PostgreSQL
// does not answer within 15 s.
func OpenPool(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if pcfg.MaxConns < 16 {
		pcfg.MaxConns = 16
	}
	// No JIT compilation: every statement of the service is short, and PostgreSQL's estimate of
	// a range of the global order (a row comparison on (transaction_id, position)) is millions
	// of rows however few it holds, which made it compile each projection's read, about a
	// second a time, once the store held ten million events (docs/benchmarks.md, growth).
	if _, set := pcfg.ConnConfig.RuntimeParams["jit"]; !set {
		pcfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	// Dates and times as text are read in ISO form, and days are UTC days, whatever the
	// database, role or server sets: the service's own SQL does not rely on either (a date
	// it reads as text goes through to_char), but a query added later should not depend on
	// where it runs.
	for name, value := range map[string]string{"datestyle": "ISO, MDY", "timezone": "UTC"} {
		if _, set := pcfg.ConnConfig.RuntimeParams[name]; !set {
			pcfg.ConnConfig.RuntimeParams[name] = value
		}
	}
	// A pooled connection idle for a second is pinged before use; one that does not answer in
	// 2 s (its peer gone silent: a partition, a failover) is dropped for a new one rather than
	// handed to a request.
	if pcfg.PingTimeout == 0 {
		pcfg.PingTimeout = 2 * time.Second
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
	return pool, nil
}

// indexLockTimeout is how long OpenIndex waits for another process to let go of the
// embedded index of the same DATA_DIR.
var indexLockTimeout = bleveindex.DefaultLockTimeout

// elasticIndexPrefix names the Elasticsearch place index: its alias, and its generations'
// prefix.
const elasticIndexPrefix = "kyapi-places"

// OpenIndex opens the place index: Elasticsearch when ELASTICSEARCH_URL is set, otherwise the
// embedded index under DATA_DIR.
func OpenIndex(ctx context.Context, cfg Config) (placeindex.Index, error) {
	if cfg.ElasticsearchURL != "" {
		return elasticindex.Open(ctx, cfg.ElasticsearchURL, elasticIndexPrefix)
	}
	// Opening waits for the index's file lock (at most indexLockTimeout; the end of ctx, a
	// signal, ends the wait) and then loads its documents into memory.
	dir := filepath.Join(cfg.DataDir, "placeindex")
	x, err := bleveindex.OpenWaiting(ctx, dir, indexLockTimeout)
	if errors.Is(err, bleveindex.ErrInUse) {
		return nil, fmt.Errorf("DATA_DIR %s is in use by another kyapi process (its place index %s stays locked): "+
			"each process needs its own DATA_DIR; stop the other process or give this one another DATA_DIR", cfg.DataDir, dir)
	}
	if err != nil && ctx.Err() == nil {
		// It holds nothing the database does not: deleted, it is rebuilt from position 0 at start.
		return nil, fmt.Errorf("%w; if the place index under DATA_DIR is damaged (a file of it truncated or deleted), delete %s: "+
			"serve then rebuilds it from the database at start", err, dir)
	}
	if err != nil {
		return nil, err
	}
	return x, nil
}

// reportIndexWrites logs the embedded index's failures to write DATA_DIR (bleve retries them on
// its own goroutines, where nobody else hears of them), at most one line a minute, and the write
// that succeeds after them (docs/operations.md, "DATA_DIR's disk full").
func reportIndexWrites(index placeindex.Index, cfg Config, log *logrus.Logger) {
	x, ok := index.(*bleveindex.Index)
	if !ok {
		return
	}
	x.ReportWriteFailures(func(err error, notReported int) {
		e := log.WithFields(logrus.Fields{"data_dir": cfg.DataDir, "errors_not_logged": notReported})
		if err == nil {
			e.Info("place index: writing DATA_DIR's place index to disk again; it holds everything served meanwhile")
			return
		}
		e.WithError(err).Error("place index: cannot write DATA_DIR's place index to disk (" + writeFailureCause(err) + "): " +
			"it serves imports from memory meanwhile, place lists with q may answer 503, and a restart before it is written " +
			"replays them from the database; once DATA_DIR can be written again, it is written by itself (retrying)")
	})
}

// writeFailureCause names what a failed write of DATA_DIR says of its cause. bleve reports
// its writes' errors as text (the system's error wrapped with %v), so they are told apart by
// the system's own words.
func writeFailureCause(err error) string {
	msg := err.Error()
	has := func(errs ...syscall.Errno) bool {
		for _, e := range errs {
			if errors.Is(err, e) || strings.Contains(msg, e.Error()) {
				return true
			}
		}
		return false
	}
	switch {
	case has(syscall.ENOSPC, syscall.EDQUOT):
		return "its disk is full: free space on it"
	case has(syscall.EROFS, syscall.EACCES, syscall.EPERM):
		return "DATA_DIR is read-only or not writable by this process: make it writable"
	}
	return "see the error: a full disk, a read-only or failing one"
}

// claimPlaceIndex makes sure the place index is this database's before serve feeds it
// (docs/operations.md, "The place index and its event store"). An embedded index built from
// another event store is this process's own (its DATA_DIR is locked): it is rebuilt from
// position 0, the log saying why. An Elasticsearch index is shared by every process on the
// cluster, which may be serving the other store still, and rebuilding it at each start would
// have two such deployments undo each other: it is refused, for `kyapi rebuild` to replace.
func claimPlaceIndex(ctx context.Context, cfg Config, pi projections.PlaceIndex, log *logrus.Logger) error {
	err := pi.Claim(ctx)
	var other *projections.ErrIndexOfAnotherStore
	var past *projections.ErrIndexPastStore
	if !errors.As(err, &other) && !errors.As(err, &past) {
		return err
	}
	if cfg.ElasticsearchURL != "" {
		if other != nil {
			return fmt.Errorf("%w: the Elasticsearch index %s (ELASTICSEARCH_URL) serves another database; run `kyapi rebuild` with this DATABASE_URL "+
				"to rebuild it from this database, or give this database a cluster of its own", err, elasticIndexPrefix)
		}
		return fmt.Errorf("%w: run `kyapi rebuild` with this DATABASE_URL to rebuild the Elasticsearch index %s (ELASTICSEARCH_URL) from this database", err, elasticIndexPrefix)
	}
	if other != nil {
		log.WithFields(logrus.Fields{"data_dir": cfg.DataDir, "index_store": other.Index, "store": other.Store}).
			Warn("place index: DATA_DIR's place index was built from another event store (another database's): rebuilding it from this database, from position 0")
	} else {
		log.WithFields(logrus.Fields{"data_dir": cfg.DataDir, "index_position": past.At.String()}).
			Warn("place index: DATA_DIR's place index holds events this database does not (it was fed from a copy of this database that went on past it: " +
				"a backup restored, a replica promoted behind its primary): rebuilding it from this database, from position 0")
	}
	start := time.Now()
	n, err := pi.Rebuild(ctx, placeIndexRebuildBatch, nil)
	if err != nil {
		return fmt.Errorf("rebuilding DATA_DIR %s's place index, not built from this database, from this one: %w", cfg.DataDir, err)
	}
	log.WithFields(logrus.Fields{"events": n, "duration_ms": time.Since(start).Milliseconds()}).Info("place index rebuilt from this database")
	return nil
}

// placeIndexRebuildBatch is the events per batch of a rebuild at start (the place index takes
// at most its own bound whatever this says).
const placeIndexRebuildBatch = 5000

// Options choose what a process serves.
type Options struct {
	Read        bool // the public read API on READ_ADDR (and this process's place index)
	Admin       bool // the admin API on ADMIN_ADDR
	Projections bool // the shared read-model projections
	// Meter, when set, replaces the production meter. Only bench/unmetered sets it, to
	// measure the same handlers without metering; `kyapi serve` cannot.
	Meter func(*eventstore.Store) readapi.Meter
	// Listening, when set, hears each API's bound address (tests listen on port 0).
	Listening func(api, addr string)
}

// maintenanceEvery is how often a serving process creates the event partitions ahead and
// deletes the dedup claims of past days (commands.Maintain).
const maintenanceEvery = time.Minute

// usageSettled is the read API's wait for the usage read model (readapi.Server.UsageSettled),
// when this process runs it: up to usageSettleWait for its checkpoint to pass the store's head
// as of the call. Nil when the process runs no usage projection (-projections=false): trending
// then serves what the read model holds.
func usageSettled(pool *pgxpool.Pool, ps []projections.Projection) func(context.Context) error {
	var usage []projections.Projection
	for _, m := range projections.Members(ps) {
		if m.Name() == "usage" {
			usage = append(usage, m)
		}
	}
	if len(usage) == 0 {
		return nil
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, usageSettleWait)
		defer cancel()
		return projections.WaitCaughtUp(ctx, pool, usage)
	}
}

// usageSettleWait bounds trending's wait for the usage read model: about three of its batches
// (a projection gathers events for 300 ms at most before applying them).
const usageSettleWait = time.Second

// importVisibleWait bounds how long POST /admin/catalog/import waits, once committed, for this
// process's catalog read models to hold the import before it answers (docs/api.md, "Catalog
// import").
const importVisibleWait = 10 * time.Second

// DefaultGOGC sets the collector's target (GOGC) to percent unless the operator set GOGC in
// the environment, and returns what puts the previous target back.
func DefaultGOGC(percent int) (restore func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(percent)
	return func() { debug.SetGCPercent(old) }
}

// Serve runs the service until ctx ends or a listener fails.
func Serve(ctx context.Context, cfg Config, log *logrus.Logger, opts Options) error {
	// A request leaves mostly short-lived garbage (its answer, its charge's event and batch):
	// letting the heap grow to three times what is live (GOGC=200) rather than twice gave the
	// metered detail load a p99 about 2 ms lower (in 6 of 7 alternating pairs; throughput the
	// same within the machine's noise), for a peak RSS of about 320 MB instead of 240 at
	// 150,000 places (docs/operations.md). A GOGC the operator set is kept. Here, not in
	// `kyapi serve`, so bench/unmetered runs the same.
	defer DefaultGOGC(200)()
	if opts.Read && opts.Admin {
		if err := checkListenAddrs(cfg); err != nil {
			return err
		}
	}
	pool, err := OpenDB(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Ended before the pool closes, whatever makes Serve return (a port in use, a signal): the
	// work started in the background below then takes a closed pool's errors for the end they
	// are, rather than logging them as failures.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	store := eventstore.New(pool)
	clock := time.Now
	startedAt := clock()

	// Read before the catch-up, which can take minutes: a key file that cannot be read is a
	// configuration error, said at once.
	var signingKey ed25519.PrivateKey
	if cfg.AuditSigningKey != "" {
		if signingKey, err = audit.LoadSigningKey(cfg.AuditSigningKey); err != nil {
			return fmt.Errorf("AUDIT_SIGNING_KEY: %w", err)
		}
	}
	var ps []projections.Projection
	if opts.Projections {
		ps = projections.All(pool, nil, clock)
	}
	var index placeindex.Index
	if opts.Read {
		if index, err = OpenIndex(ctx, cfg); err != nil {
			return fmt.Errorf("place index: %w", err)
		}
		defer index.Close()
		reportIndexWrites(index, cfg, log)
		storeID, err := eventstore.StoreID(ctx, pool)
		if err != nil {
			return err
		}
		pi := projections.PlaceIndex{Pool: pool, Index: index, Store: storeID}
		if err := claimPlaceIndex(ctx, cfg, pi, log); err != nil {
			return fmt.Errorf("place index: %w", err)
		}
		ps = append(ps, pi)
	}
	// Catch up before listening, so the first answers come from complete read models.
	start := time.Now()
	for _, p := range ps {
		n, err := projections.CatchUp(ctx, pool, p, 5000, nil)
		if err != nil {
			return fmt.Errorf("catching up %s: %w", p.Name(), err)
		}
		if n > 0 {
			log.WithFields(logrus.Fields{"projection": p.Name(), "events": n}).Info("caught up")
		}
	}
	log.WithField("duration_ms", time.Since(start).Milliseconds()).Info("projections ready")
	// What the requests in flight need — the projections an import's answer waits for, the
	// key-change notifications — runs until the servers have shut down, not only until the
	// signal: a request still draining then would wait for read models no longer updated
	// (an import committed, its answer held for nothing and then cut) or miss a revoke.
	live, endLive := context.WithCancel(context.WithoutCancel(ctx))
	defer endLive()
	runner := &projections.Runner{Pool: pool, Projections: ps, Log: log}
	store.OnAppend = runner.Wake
	if err := runner.Start(live); err != nil {
		return err
	}
	defer runner.Close()
	go maintain(ctx, store, clock, log)
	if signingKey != nil {
		go digestHourly(ctx, pool, signingKey, clock, log)
	}
	mets := metrics.New(metrics.Source{Pool: pool, Projections: ps, FailedTries: runner.FailedTries})

	var meter *commands.Meter
	if opts.Read || opts.Admin {
		meter = commands.NewMeter(store, clock, commands.MeterOptions{MaxClaims: cfg.MeterMaxClaims,
			BeforeBatch: mets.BatchSize, OnClaimsRead: mets.ClaimsRead, OnDecided: mets.Decided})
		defer meter.Close()
		mets.WatchMeter(meter.ClaimsHeld, meter.ClaimsForgotten, meter.AccountsHeld)
		go watchClaims(ctx, meter, cfg.MeterMaxClaims, log)
		go meter.Keys().Listen(live, func(err error) {
			log.WithError(err).Warn("lost the key-change notifications; reconnecting (cached keys are dropped)")
		})
	}
	accounts := commands.Accounts{Store: store, Clock: clock,
		GrantProgress: func(g commands.BonusGrant) {
			log.WithFields(logrus.Fields{"outage_id": g.OutageID, "accounts": g.Accounts, "state": g.State}).Info("bonus grant progress")
		}}
	if meter != nil {
		accounts.KeysChanged = meter.Keys().Forget
	}
	if opts.Admin {
		// A grant left running by a process that stopped is finished in the background.
		go resumeGrants(ctx, accounts, log, func(ctx context.Context) bool { return sleepCtx(ctx, maintenanceEvery) })
	}

	// The admin listener's handlers (the console parses its templates) are built before any
	// listener opens.
	var adminHandler http.Handler
	if opts.Admin {
		if cfg.AdminToken == "" {
			log.Warn("ADMIN_TOKEN is not set: the admin API refuses every call")
		}
		imports, views := commands.ImportCatalog{Store: store, Clock: clock}, commands.Views{Pool: pool}
		admin := &adminapi.Server{
			Accounts: accounts,
			Import:   imports,
			Views:    views,
			LatestDigest: func(ctx context.Context) (json.RawMessage, error) {
				return audit.LatestDigest(ctx, pool)
			},
			Token: cfg.AdminToken,
			Log:   log,
			Clock: clock,
		}
		// What the read API serves of the catalog comes from these read models: an import is
		// answered once those this process runs hold it (docs/api.md, "Catalog import").
		var catalogViews []projections.Projection
		for _, p := range ps {
			if n := p.Name(); n == "catalog" || n == "placeindex" {
				catalogViews = append(catalogViews, p)
			}
		}
		if len(catalogViews) > 0 {
			admin.Imported = func(ctx context.Context) error {
				// Bounded: read models held back (a long transaction, Elasticsearch down) delay
				// the answer, never withhold it; the import is committed either way.
				ctx, cancel := context.WithTimeout(ctx, importVisibleWait)
				defer cancel()
				return projections.WaitCaughtUp(ctx, pool, catalogViews)
			}
		}
		con := &console.Server{Accounts: accounts, Import: imports, Views: views, Pool: pool, Projections: ps,
			Token: cfg.AdminToken, Log: log, Clock: clock, Version: Version(), StartedAt: startedAt, Imported: admin.Imported}
		adminHandler = adminListener(admin.Handler(), con.Handler(), mets, log)
	}
	var servers []*http.Server
	// stopNow ends what the servers' handlers run detached from their requests (httpx.Detach:
	// a bonus grant, a console key replacement) once the process stops for good.
	processStop, stopNow := context.WithCancel(context.Background())
	base := httpx.WithProcessStop(context.Background(), processStop)
	// Each API's address is bound (listen) and served only once every address is (serving): a
	// serve that fails to start (the read port in use, the rate limiter) has answered no call
	// on the address it bound first, which its exit would cut off, committed or not.
	var (
		listeners []net.Listener
		serving   []func()
	)
	// However Serve returns, no server outlives it: the admin address is closed, not left
	// listening, when a step after it was bound fails.
	defer func() {
		stopNow()
		for _, s := range servers {
			_ = s.Close()
		}
		for _, ln := range listeners {
			_ = ln.Close() // one never served; a served one is closed already
		}
	}()
	errc := make(chan error, 2)
	listen := func(name, addr string, h http.Handler, tls bool) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s API: %w", name, err)
		}
		listeners = append(listeners, ln)
		srv := NewHTTPServer(h, func(refuse http.Handler) http.Handler {
			return mets.ObserveRoute(name, "unmatched", refuse)
		}, log)
		srv.BaseContext = func(net.Listener) context.Context { return base }
		servers = append(servers, srv)
		if opts.Listening != nil {
			opts.Listening(name, ln.Addr().String())
		}
		// Said once it is served, not when bound: a start that fails after binding this address
		// (the next one taken) has never served it.
		serving = append(serving, func() {
			log.WithFields(logrus.Fields{"api": name, "addr": ln.Addr().String(), "tls": tls}).Info("listening")
			if name == "admin" {
				log.WithField("url", "http://"+ln.Addr().String()+"/console/").Info("console")
			}
			go func() {
				var err error
				if tls {
					err = srv.ServeTLS(ln, cfg.TLSCertFile, cfg.TLSKeyFile)
				} else {
					err = srv.Serve(ln)
				}
				if !errors.Is(err, http.ErrServerClosed) {
					errc <- fmt.Errorf("%s API: %w", name, err)
				}
			}()
		})
		return nil
	}
	// The admin listener opens first: callers wait for the read API's /healthz, and then find
	// the admin address listening too.
	if opts.Admin {
		err := listen("admin", cfg.AdminAddr, adminHandler, false)
		switch {
		case err != nil && opts.Read && cfg.AdminAddrDefault && errors.Is(err, syscall.EADDRINUSE):
			// Another serve process on this machine has the default admin address (ADMIN_ADDR
			// unset on both): this one serves the read API without it, as decisions.md lets
			// several processes share one database; operators use the first one's.
			log.WithField("addr", cfg.AdminAddr).Warn("admin API not started: its default address is taken (another serve process on this machine?); set ADMIN_ADDR to serve it here too")
		case err != nil:
			return err
		}
	}
	if opts.Read {
		var m readapi.Meter = meter
		if opts.Meter != nil {
			m = opts.Meter(store)
		}
		limiter, closeLimiter, err := OpenLimiter(ctx, cfg, pool, log)
		if err != nil {
			return err
		}
		defer closeLimiter()
		read := &readapi.Server{
			UsageSettled:       usageSettled(pool, ps),
			Meter:              mets.Meter(m),
			Pool:               pool,
			Index:              index,
			Clock:              clock,
			CanonicalBaseURL:   cfg.CanonicalBaseURL,
			RateLimitPerMinute: cfg.RateLimit,
			Limiter:            limiter,
			Log:                log,
		}
		if err := listen("read", cfg.ReadAddr, mets.Observe("read", read.Handler()), cfg.TLSCertFile != ""); err != nil {
			return err
		}
	}
	for _, serve := range serving {
		serve()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.Info("shutting down")
	shutdown(servers, shutdownWait, stopNow)
	return err
}

// shutdownWait is how long a stopping serve waits for the requests in flight.
var shutdownWait = 15 * time.Second

// shutdown stops every server accepting at once, so that none takes new (paid) requests while
// another drains, and waits up to wait for their requests in flight. A server still busy then
// has its connections cut: its handlers' contexts end, stopNow ends what they run detached
// (httpx.Detach), and they let go of their pooled connections, which the pool's Close waits for.
func shutdown(servers []*http.Server, wait time.Duration, stopNow func()) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() {
			if s.Shutdown(ctx) != nil {
				stopNow()
				_ = s.Close()
			}
		})
	}
	wg.Wait()
}

// OpenLimiter is the read API's rate limiter, shared by every serve process: in Redis when
// REDIS_URL is set, otherwise in the database (pool), with the process as its fallback while
// the store does not answer. It logs which.
func OpenLimiter(ctx context.Context, cfg Config, pool *pgxpool.Pool, log *logrus.Logger) (ratelimit.Limiter, func(), error) {
	var (
		shared *ratelimit.Shared
		fields logrus.Fields
	)
	if cfg.RedisURL == "" {
		shared = ratelimit.NewSharedInDatabase(pool, cfg.RedisTimeout, log)
		fields = logrus.Fields{"limiter": "postgres"}
	} else {
		var err error
		if shared, err = ratelimit.OpenShared(cfg.RedisURL, cfg.RedisTimeout, log); err != nil {
			return nil, nil, err
		}
		fields = logrus.Fields{"limiter": "redis", "redis": shared.Describe()}
	}
	if err := shared.Check(ctx); err != nil {
		log.WithFields(fields).Warnf("rate limiter: shared in %s, which does not answer yet; counting in the process until it does", shared.Store())
	} else {
		log.WithFields(fields).Infof("rate limiter: shared in %s: every process counts each key's requests together", shared.Store())
	}
	return shared, func() { _ = shared.Close() }, nil
}

// resumeGrants finishes the bonus grants left running by a process that stopped
// (commands.Accounts.ResumeGrants), trying again after wait while one fails (PostgreSQL
// unreachable at start, a statement failing), until every grant is done or ctx ends: a
// failure at start no longer leaves a grant running until someone asks for it again.
func resumeGrants(ctx context.Context, accounts commands.Accounts, log *logrus.Logger, wait func(context.Context) bool) {
	for {
		err := accounts.ResumeGrants(ctx, eventstore.Metadata{Actor: "serve:resume"})
		if err == nil || ctx.Err() != nil {
			return
		}
		log.WithError(err).Error("resuming bonus grants; trying again in a minute")
		if !wait(ctx) {
			return
		}
	}
}

// sleepCtx waits d, or until ctx ends: false then.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// maintain runs commands.Maintain now and every maintenanceEvery until ctx ends.
func maintain(ctx context.Context, store *eventstore.Store, clock func() time.Time, log *logrus.Logger) {
	t := time.NewTicker(maintenanceEvery)
	defer t.Stop()
	for {
		if parts, chunks, err := commands.Maintain(ctx, store, clock()); err != nil {
			if ctx.Err() == nil {
				log.WithError(err).Warn("maintenance failed; it runs again in a minute")
			}
		} else if parts > 0 || chunks > 0 {
			log.WithFields(logrus.Fields{"partitions_created": parts, "claim_chunks_deleted": chunks}).Info("maintenance")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchClaims warns, at most once a minute, when the meter forgot accounts' dedup claims in
// the minute before to stay within METER_MAX_CLAIMS: every one of them is read back from the
// store when it is next charged, and once the day's claims outgrow the bound that is most
// batches, at about twice the cost of a metered request (docs/operations.md, "The maintenance
// loop").
func watchClaims(ctx context.Context, meter *commands.Meter, max int, log *logrus.Logger) {
	t := time.NewTicker(maintenanceEvery)
	defer t.Stop()
	w := claimsWatcher{meter: meter, max: max, log: log, last: meter.ClaimsForgotten()}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.check()
		}
	}
}

// claimsWatcher is watchClaims's state between two looks at the meter.
type claimsWatcher struct {
	meter interface {
		ClaimsForgotten() int64
		ClaimsHeld() int
	}
	max  int
	log  *logrus.Logger
	last int64 // ClaimsForgotten at the last look
}

// check warns if the meter forgot claims for its bound since the last look.
func (w *claimsWatcher) check() {
	n := w.meter.ClaimsForgotten()
	if n <= w.last {
		return
	}
	w.log.WithFields(logrus.Fields{"accounts_forgotten": n - w.last, "claims_held": w.meter.ClaimsHeld(), "meter_max_claims": w.max}).
		Warn("the meter forgot accounts' dedup claims of the day to stay within METER_MAX_CLAIMS; each is read back from the store when it is next charged, which slows metered requests: raise METER_MAX_CLAIMS")
	w.last = n
}

// Header limits: past headerLimit a request gets a 431 with the error body; past
// headerHardCap net/http refuses it itself, before any handler runs.
const (
	headerLimit   = 16 << 10
	headerHardCap = 64 << 10
)

// NewHTTPServer sets every timeout, so a slow or idle client cannot hold a connection. log
// gets the access-log line of a request refused for its headers, and count, when not nil,
// serves that refusal too (the request metrics, docs/operations.md, "Metrics"): it is refused
// before h, which the metrics wrap.
func NewHTTPServer(h http.Handler, count func(http.Handler) http.Handler, log *logrus.Logger) *http.Server {
	return &http.Server{
		Handler:           httpx.LimitHeaders(headerLimit, log, count)(h),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    headerHardCap,
		// OPTIONS * goes to h, which authenticates it like any other request, rather than
		// net/http's own 200 to anyone.
		DisableGeneralOptionsHandler: true,
	}
}

// digestEvery is how often a serving process with a signing key saves a digest of the store;
// digestCheckEvery how often it looks whether one is due (another process may have taken it).
const (
	digestEvery      = time.Hour
	digestCheckEvery = time.Minute
)

// digestHourly saves a signed digest (audit.DigestIfDue) whenever the newest is an hour old.
func digestHourly(ctx context.Context, pool *pgxpool.Pool, key ed25519.PrivateKey, clock func() time.Time, log *logrus.Logger) {
	t := time.NewTicker(digestCheckEvery)
	defer t.Stop()
	for {
		took, err := audit.DigestIfDue(ctx, pool, key, clock(), digestEvery)
		switch {
		case err != nil && ctx.Err() == nil:
			log.WithError(err).Warn("taking the hourly digest failed; it is tried again in a minute")
		case took:
			log.Info("saved a signed digest of the store (GET /admin/digest)")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
