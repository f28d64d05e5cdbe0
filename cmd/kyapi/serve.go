package main

import (
	"context"

	"github.com/kyapi/kyapi/internal/app"
)

func runServe(ctx context.Context, args []string) error {
	fs := newFlags("serve", "[-read=true] [-admin=true] [-projections=true]")
	withRead := fs.Bool("read", true, "serve the public read API on READ_ADDR")
	withAdmin := fs.Bool("admin", true, "serve the admin API on ADMIN_ADDR")
	withProjections := fs.Bool("projections", true, "run the shared read-model projections (the place index always runs with -read)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !*withRead && !*withAdmin && !*withProjections {
		return usageError(fs, "-read=false -admin=false -projections=false leaves nothing to serve: keep at least one")
	}
	cfg, err := app.LoadConfig()
	if err != nil {
		return err
	}
	return app.Serve(ctx, cfg, app.NewLogger(cfg.LogLevel), app.Options{Read: *withRead, Admin: *withAdmin, Projections: *withProjections})
}
