// Command metered is a benchmark-only server for profiling: `kyapi serve`'s read API with
// the real meter (commands.Charger) and every projection running, plus net/http/pprof on
// a loopback address, so bench/run.sh can take a CPU profile while kyload drives it.
// `kyapi serve` itself exposes no pprof endpoint.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kyapi/kyapi/bench/internal/benchserve"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/readapi"
)

func main() {
	pprofAddr := flag.String("pprof", "127.0.0.1:6060", "loopback address of the pprof listener")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := benchserve.Run(ctx, benchserve.Options{Projections: true, PprofAddr: *pprofAddr}, func(store *eventstore.Store) readapi.Meter {
		// Wired as kyapi serve wires it: charges share transactions (group commit).
		return commands.Charger{Store: store, Clock: time.Now,
			Group: commands.NewGroupCommitter(store, time.Now, commands.GroupCommitOptions{})}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "metered:", err)
		os.Exit(1)
	}
}
