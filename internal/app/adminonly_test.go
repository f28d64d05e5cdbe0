package app_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/internal/app"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// `kyapi serve -read=false` (an admin-only process), ADMIN_ADDR unset and its default
// address taken: it stops with "address already in use", as a process with nothing to serve
// (a read API that goes on without the admin API is the one that only warns; found by review).
func TestAnAdminOnlyServeWhoseDefaultAdminAddressIsTakenStops(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := app.Config{DatabaseURL: pgtest.NewDatabase(t), ReadAddr: "127.0.0.1:0", AdminAddr: busy.Addr().String(),
		AdminAddrDefault: true, // ADMIN_ADDR unset
		AdminToken:       "admin-token", DataDir: t.TempDir(), CanonicalBaseURL: "http://localhost:8080", RateLimit: 60}
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err = app.Serve(ctx, cfg, log, app.Options{Read: false, Admin: true, Projections: false})
	if ctx.Err() != nil {
		t.Fatalf("an admin-only serve without its admin address ran on for %v listening on nothing (returned %v only when its context ended)", time.Since(start).Round(time.Second), err)
	}
	if err == nil {
		t.Fatal("no error")
	}
}
