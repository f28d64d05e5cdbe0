// Command metered is a benchmark-only server for profiling: `kyapi serve`'s own wiring
// (app.Serve: the read API with the real meter, every projection running), plus
// net/http/pprof on a loopback address, so bench/run.sh can take a CPU profile while kyload
// drives it. `kyapi serve` itself exposes no pprof endpoint.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux, served only on -pprof
	"os"
	"os/signal"
	"syscall"

	"github.com/kyapi/kyapi/internal/app"
)

func main() {
	pprofAddr := flag.String("pprof", "127.0.0.1:6060", "loopback address of the pprof listener")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *pprofAddr); err != nil {
		fmt.Fprintln(os.Stderr, "metered:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, pprofAddr string) error {
	host, _, err := net.SplitHostPort(pprofAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("pprof address %q must be a loopback ip:port", pprofAddr)
	}
	go func() { _ = http.ListenAndServe(pprofAddr, nil) }()
	cfg, err := app.LoadConfig()
	if err != nil {
		return err
	}
	return app.Serve(ctx, cfg, app.NewLogger(cfg.LogLevel), app.Options{Read: true, Projections: true})
}
