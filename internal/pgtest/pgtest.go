// Package pgtest gives each test its own freshly migrated PostgreSQL database on a real
// server: DATABASE_URL when set, otherwise the project's private cluster (scripts/devdb.sh).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/migrations"
)

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
)

// ServerURL returns the URL of the server tests run against, starting the private cluster
// when DATABASE_URL is not set.
func ServerURL(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		if u := os.Getenv("DATABASE_URL"); u != "" {
			serverURL = u
			return
		}
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "devdb.sh")
		out, err := exec.Command(script, "url").Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				err = &scriptError{err, string(ee.Stderr)}
			}
			serverErr = err
			return
		}
		serverURL = strings.TrimSpace(string(out))
	})
	if serverErr != nil {
		t.Fatalf("pgtest: cannot start PostgreSQL: %v", serverErr)
	}
	return serverURL
}

type scriptError struct {
	err    error
	stderr string
}

func (e *scriptError) Error() string { return e.err.Error() + ": " + e.stderr }

// NewDatabase creates an empty migrated database for this test, dropped when it ends, and
// returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "")
}

// NewDatabaseICU is NewDatabase for a database whose default collation is the ICU locale
// icuLocale ("en-US"), as an operator's `CREATE DATABASE ... LOCALE_PROVIDER icu` makes one,
// rather than the private cluster's C.UTF-8.
func NewDatabaseICU(t testing.TB, icuLocale string) string {
	t.Helper()
	return newDatabase(t, " TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE '"+strings.ReplaceAll(icuLocale, "'", "''")+"'")
}

// newDatabase creates the database with the options of CREATE DATABASE given, migrates it,
// and returns its URL.
func newDatabase(t testing.TB, options string) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "kyapi_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+options); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		admin, err := pgxpool.New(context.Background(), ServerURL(t))
		if err != nil {
			return
		}
		defer admin.Close()
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	dbURL := u.String()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return dbURL
}

// NewPool is NewDatabase plus a pool on it, closed when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewPoolICU is NewDatabaseICU plus a pool on it, closed when the test ends.
func NewPoolICU(t testing.TB, icuLocale string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), NewDatabaseICU(t, icuLocale))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ExecAsOlderVersion runs sql with the database's triggers off (session_replication_role
// replica, in a transaction of its own): how a test makes rows look as an earlier version of
// kyapi left them, where the triggers of later migrations would refuse the change (an archive
// row dated before a migration, for instance).
func ExecAsOlderVersion(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
