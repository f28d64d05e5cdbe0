// Package migrations owns the database schema: numbered SQL files, embedded in the binary and
// applied in order, each once, by Apply (`kyapi migrate`).
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed *.sql
var files embed.FS

// Apply runs every migration not yet recorded in schema_migrations, each in its own
// transaction. Concurrent callers serialize on an advisory lock.
func Apply(ctx context.Context, pool *pgxpool.Pool) (applied []string, err error) {
	return ApplyThrough(ctx, pool, "")
}

// ApplyThrough is Apply stopping after the migration named last ("" for all): tests use it to
// build a database as an earlier version left it.
func ApplyThrough(ctx context.Context, pool *pgxpool.Pool, last string) (applied []string, err error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	if last != "" {
		names = names[:sort.SearchStrings(names, last)+1]
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	// Another process migrating holds the lock until it is done: a wait that ends in an error
	// (a signal) says what it was waiting for, since it can last as long as a migration.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(72100001)`); err != nil {
		return nil, fmt.Errorf("taking the migrations' lock (advisory lock 72100001, held while another process migrates): %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(72100001)`)
	// A store that is up to date asks for no privilege beyond reading schema_migrations: the
	// serving role need not own the tables nor be allowed to create any (docs/operations.md,
	// "What protects the history").
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return nil, err
		}
	}
	rows, err := conn.Query(ctx, `SELECT name FROM schema_migrations`)
	if err != nil {
		return nil, err
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if slices.Contains(done, name) {
			continue
		}
		sql, err := files.ReadFile(name)
		if err != nil {
			return applied, err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name) VALUES ($1) ON CONFLICT DO NOTHING`, name)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return fmt.Errorf("migration %s: %w", name, err)
			}
			applied = append(applied, name)
			return nil
		})
		if err != nil {
			return applied, err
		}
	}
	return applied, nil
}
