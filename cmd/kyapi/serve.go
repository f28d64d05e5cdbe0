package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/adminapi"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
	"github.com/kyapi/kyapi/projections/placeindex/elasticindex"
	"github.com/kyapi/kyapi/readapi"
)

// openIndex opens the place index: Elasticsearch when ELASTICSEARCH_URL is set, otherwise
// the embedded index under DATA_DIR.
func openIndex(ctx context.Context, cfg config) (placeindex.Index, error) {
	if cfg.ElasticsearchURL != "" {
		return elasticindex.Open(ctx, cfg.ElasticsearchURL, "kyapi-places")
	}
	return bleveindex.Open(filepath.Join(cfg.DataDir, "placeindex"))
}

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	withRead := fs.Bool("read", true, "serve the public read API on READ_ADDR")
	withAdmin := fs.Bool("admin", true, "serve the admin API on ADMIN_ADDR")
	withProjections := fs.Bool("projections", true, "run the shared read-model projections (the place index always runs with -read)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, pool, err := connect(ctx)
	if err != nil {
		return err
	}
	log := newLogger(cfg.LogLevel)
	defer pool.Close()
	store := eventstore.New(pool)

	var ps []projections.Projection
	if *withProjections {
		ps = projections.All(pool, nil, cfg.CanonicalBaseURL)
	}
	var index placeindex.Index
	if *withRead {
		if index, err = openIndex(ctx, cfg); err != nil {
			return fmt.Errorf("place index: %w", err)
		}
		defer index.Close()
		ps = append(ps, projections.PlaceIndex{Pool: pool, Index: index})
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
	runner := &projections.Runner{Pool: pool, Projections: ps, Log: log}
	store.OnAppend = runner.Wake
	if err := runner.Start(ctx); err != nil {
		return err
	}
	defer runner.Close()

	clock := time.Now
	var servers []*http.Server
	errc := make(chan error, 2)
	listen := func(name, addr string, h http.Handler, tls bool) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s API: %w", name, err)
		}
		srv := newHTTPServer(h, log)
		servers = append(servers, srv)
		log.WithFields(logrus.Fields{"api": name, "addr": ln.Addr().String(), "tls": tls}).Info("listening")
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
		return nil
	}
	if *withRead {
		// Concurrent charges share transactions and commits (group commit); each still gets
		// its own exact answer.
		group := commands.NewGroupCommitter(store, clock, commands.GroupCommitOptions{})
		defer group.Close()
		read := &readapi.Server{
			Charger:            commands.Charger{Store: store, Clock: clock, Group: group},
			Pool:               pool,
			Index:              index,
			Clock:              clock,
			CanonicalBaseURL:   cfg.CanonicalBaseURL,
			RateLimitPerMinute: cfg.RateLimit,
			Log:                log,
		}
		if err := listen("read", cfg.ReadAddr, read.Handler(), cfg.TLSCertFile != ""); err != nil {
			return err
		}
	}
	if *withAdmin {
		if cfg.AdminToken == "" {
			log.Warn("ADMIN_TOKEN is not set: the admin API refuses every call")
		}
		shared := projections.All(pool, nil, cfg.CanonicalBaseURL)
		admin := &adminapi.Server{
			Accounts: commands.Accounts{Store: store, Clock: clock},
			Import:   commands.ImportCatalog{Store: store, Clock: clock},
			Pool:     pool,
			Token:    cfg.AdminToken,
			Log:      log,
			Clock:    clock,
			WaitProjected: func(ctx context.Context) error {
				runner.Wake()
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				return projections.WaitCaughtUp(ctx, pool, shared)
			},
		}
		if err := listen("admin", cfg.AdminAddr, admin.Handler(), false); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdownCtx)
	}
	return err
}

// Header limits: past headerLimit a request gets a 431 with the error body; past
// headerHardCap net/http refuses it itself, before any handler runs.
const (
	headerLimit   = 16 << 10
	headerHardCap = 64 << 10
)

// newHTTPServer sets every timeout, so a slow or idle client cannot hold a connection.
func newHTTPServer(h http.Handler, log *logrus.Logger) *http.Server {
	return &http.Server{
		Handler:           httpx.LimitHeaders(headerLimit)(h),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    headerHardCap,
		ErrorLog:          nil,
	}
}
