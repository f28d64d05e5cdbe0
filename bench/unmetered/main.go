// Command unmetered is a BENCHMARK BASELINE, not a way to run the API: it serves the read
// API's handlers through `kyapi serve`'s own wiring (app.Serve), over the same database and
// place index, but with a no-op meter, so `make bench` can compare metered throughput with the
// same handlers unmetered. Every well-formed key is accepted as one fixed caller and every row
// is served at 0 credits; nothing is charged, deduplicated or appended.
//
// It is reachable only from bench/run.sh. `kyapi serve` has no flag that turns metering off.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/app"
	"github.com/kyapi/kyapi/readapi"
)

// noMeter accepts every well-formed key and serves every row for free.
type noMeter struct{}

func (noMeter) Authenticate(_ context.Context, hash domain.KeyHash) (commands.Caller, error) {
	return commands.Caller{AccountID: "acct_unmetered_baseline", KeyID: "key_unmetered_baseline", KeyHash: hash}, nil
}

func (noMeter) Verify(context.Context, domain.KeyHash) error { return nil }

func (noMeter) Charge(_ context.Context, req commands.ChargeRequest) (commands.ChargeResult, error) {
	served := make([]bool, len(req.Resources))
	for i := range served {
		served[i] = true
	}
	return commands.ChargeResult{ChargeDecision: domain.ChargeDecision{Served: served}}, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := app.LoadConfig()
	if err == nil {
		err = app.Serve(ctx, cfg, app.NewLogger(cfg.LogLevel), app.Options{Read: true,
			Meter: func(*eventstore.Store) readapi.Meter { return noMeter{} }})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "unmetered:", err)
		os.Exit(1)
	}
}
