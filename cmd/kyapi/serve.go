package main

import (
	"context"
	"flag"

	"github.com/kyapi/kyapi/internal/app"
)

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	withRead := fs.Bool("read", true, "serve the public read API on READ_ADDR")
	withAdmin := fs.Bool("admin", true, "serve the admin API on ADMIN_ADDR")
	withProjections := fs.Bool("projections", true, "run the shared read-model projections (the place index always runs with -read)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := app.LoadConfig()
	if err != nil {
		return err
	}
	return app.Serve(ctx, cfg, app.NewLogger(cfg.LogLevel), app.Options{Read: *withRead, Admin: *withAdmin, Projections: *withProjections})
}
