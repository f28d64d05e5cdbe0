// Package benchserve wires the read API for the benchmark-only servers under bench/: the
// same readapi.Server handlers, database and embedded place index as `kyapi serve`, with
// the meter chosen by the caller. Nothing in cmd/kyapi imports it, so no production
// process can be started without metering.
package benchserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux, served only on PprofAddr
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/migrations"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
	"github.com/kyapi/kyapi/readapi"
)

// Options choose what runs besides the read API.
type Options struct {
	// Projections runs every projection, as `kyapi serve` does, so the events the meter
	// appends are projected while the load runs.
	Projections bool
	// PprofAddr, when set, serves net/http/pprof there; it must be a loopback address.
	PprofAddr string
}

// Run serves the read API on READ_ADDR over DATABASE_URL and DATA_DIR/placeindex (the same
// environment as `kyapi serve`) with the meter built by newMeter, until ctx ends.
func Run(ctx context.Context, opts Options, newMeter func(*eventstore.Store) readapi.Meter) error {
	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		return errors.New("DATABASE_URL is not set")
	}
	readAddr := envOr("READ_ADDR", ":8080")
	base := strings.TrimRight(envOr("CANONICAL_BASE_URL", "http://localhost:8080"), "/")
	rateLimit, err := strconv.Atoi(envOr("RATE_LIMIT_PER_MINUTE", "60"))
	if err != nil || rateLimit < 1 {
		return fmt.Errorf("RATE_LIMIT_PER_MINUTE must be a positive integer")
	}
	log := logrus.New()
	log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	if l, err := logrus.ParseLevel(envOr("LOG_LEVEL", "info")); err == nil {
		log.SetLevel(l)
	}

	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = max(pcfg.MaxConns, 16) // as cmd/kyapi openDB
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrations.Apply(ctx, pool); err != nil {
		return err
	}
	store := eventstore.New(pool)
	index, err := bleveindex.Open(filepath.Join(envOr("DATA_DIR", "./data"), "placeindex"))
	if err != nil {
		return fmt.Errorf("place index: %w", err)
	}
	defer index.Close()

	ps := []projections.Projection{projections.PlaceIndex{Pool: pool, Index: index}}
	if opts.Projections {
		ps = append(projections.All(pool, nil, base), ps...)
	}
	for _, p := range ps {
		if _, err := projections.CatchUp(ctx, pool, p, 5000, nil); err != nil {
			return fmt.Errorf("catching up %s: %w", p.Name(), err)
		}
	}
	if opts.Projections {
		runner := &projections.Runner{Pool: pool, Projections: ps, Log: log}
		store.OnAppend = runner.Wake
		if err := runner.Start(ctx); err != nil {
			return err
		}
		defer runner.Close()
	}

	if opts.PprofAddr != "" {
		host, _, err := net.SplitHostPort(opts.PprofAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("pprof address %q must be a loopback ip:port", opts.PprofAddr)
		}
		go func() { _ = http.ListenAndServe(opts.PprofAddr, nil) }()
	}

	read := &readapi.Server{
		Charger:            newMeter(store),
		Pool:               pool,
		Index:              index,
		Clock:              time.Now,
		CanonicalBaseURL:   base,
		RateLimitPerMinute: rateLimit,
		Log:                log,
	}
	ln, err := net.Listen("tcp", readAddr)
	if err != nil {
		return err
	}
	// The same timeouts as cmd/kyapi newHTTPServer.
	srv := &http.Server{Handler: read.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 16 << 10}
	log.WithFields(logrus.Fields{"api": "read", "addr": ln.Addr().String()}).Info("listening")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
