package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// A serve started while another process migrates the database waits for it (migrations hold
// an advisory lock). Stopped while it waits, it exits 1 saying that it was waiting for the
// migrations, as a serve stopped at any other step of its start names the step
// (docs/operations.md), not with a bare "context canceled".
func TestAServeStoppedWhileAnotherProcessMigratesSaysSo(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	other, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	// The lock migrations.Apply takes: another process is migrating.
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock(72100001)`); err != nil {
		t.Fatal(err)
	}
	p := startKyapi(t, map[string]string{"DATABASE_URL": dbURL, "READ_ADDR": freeAddr(t), "ADMIN_ADDR": freeAddr(t)}, "serve")
	for ; ; time.Sleep(50 * time.Millisecond) { // until serve waits for the lock, or ends
		var waiting bool
		if err := other.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if p.ended() {
			t.Fatalf("serve does not wait for the migration lock\n%s", p.output())
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	out, code, ended := p.wait(30 * time.Second)
	if !ended || code != 1 || !strings.Contains(out, "migrations") {
		t.Fatalf("serve stopped while another process migrates: ended %v, exit %d; want 1 and the step (migrations) named\n%s", ended, code, out)
	}
}
