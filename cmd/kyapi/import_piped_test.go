package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// Imports may run side by side, and a deadlock between two of them (PostgreSQL ends one) runs
// the ended one again (docs/limits.md, "Catalog import"): the batch is read again. A FILE that
// is a pipe (bash's `kyapi import <(zcat catalog.ndjson.gz)`, a FIFO) can be read only once, so
// it is kept from its first read: read again by its path it was empty, and the import committed
// nothing of it and reported success ("0 towns, 0 places, 0 events").
func TestAPipedFileIsNotLostWhenTheImportStartsOver(t *testing.T) {
	ctx := context.Background()
	dbURL, pool, write := importSetup(t)
	// The towns exist: a second import of them locks their stream heads.
	first := write("first.ndjson", `{"record":"town","slug":"a-town","name":"A"}`+"\n"+`{"record":"town","slug":"b-town","name":"B"}`+"\n")
	if err := runImport(ctx, []string{first}); err != nil {
		t.Fatal(err)
	}
	// Room for the other transaction to join the deadlock before the import's backend checks.
	dbName := dbURL[strings.LastIndex(dbURL, "/")+1:]
	if i := strings.IndexByte(dbName, '?'); i >= 0 {
		dbName = dbName[:i]
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %q SET deadlock_timeout = '3s'`, dbName)); err != nil {
		t.Fatal(err)
	}
	pool.Reset()

	// Another writer (say, an admin import of the same towns in another order) holds b-town.
	other, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, `SET deadlock_timeout = '1min'`); err != nil {
		t.Fatal(err)
	}
	otherTx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otherTx.Exec(ctx, `SELECT 1 FROM streams WHERE stream_id = 'town-b-town' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	// kyapi import <(...): the catalog comes through a pipe named by /dev/fd/N.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		fmt.Fprintln(w, `{"record":"town","slug":"a-town","name":"A, updated"}`)
		fmt.Fprintln(w, `{"record":"town","slug":"b-town","name":"B, updated"}`)
		fmt.Fprintln(w, `{"record":"place","place_id":"piped-place","name":"Piped Place","category":"food.cafe"}`)
		w.Close()
	}()
	done := make(chan error, 1)
	go func() { done <- runImport(ctx, []string{fmt.Sprintf("/dev/fd/%d", r.Fd())}) }()

	// Once the import waits for b-town (holding a-town), the other writer asks for a-town:
	// PostgreSQL ends the import's transaction as a deadlock, and kyapi import starts it over.
	for {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> $1`, other.PgConn().PID()).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case err := <-done: // it never waited for b-town: the deadlock this test makes is not made
			t.Fatalf("kyapi import ended before it waited for the other writer: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := otherTx.Exec(ctx, `SELECT 1 FROM streams WHERE stream_id = 'town-a-town' FOR UPDATE`); err != nil {
		t.Fatalf("the other writer: %v", err)
	}
	if err := otherTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	err = <-done
	var places int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM streams WHERE stream_id = 'place-piped-place' AND version > 0`).Scan(&places); err != nil {
		t.Fatal(err)
	}
	if err != nil || places != 1 {
		t.Fatalf("kyapi import of a piped file run again after a deadlock: %v; the place piped-place stored %d times, want the import to succeed and store it", err, places)
	}
}

// The first signal stops every command (docs/operations.md): `kyapi import -` waiting on a
// standard input that nothing writes to or closes stops too, nothing imported. (It waited for
// the input to end: with the old code this test never ends, and go test's own timeout fails it.)
func TestAnImportWaitingOnItsInputStopsWhenAsked(t *testing.T) {
	_, pool, _ := importSetup(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); r.Close() })
	stdin := os.Stdin
	os.Stdin = r
	t.Cleanup(func() { os.Stdin = stdin })
	fmt.Fprintln(w, `{"record":"town","slug":"a-town","name":"A"}`) // and then nothing, never closed

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runImport(ctx, []string{"-"}) }()
	// Once the import has read the line (nothing left in the pipe), it waits for more.
	for {
		n, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ) // FIONREAD: bytes not yet read
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("kyapi import - ended before it read its input: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("kyapi import - asked to stop: %v; want it stopped (context canceled)", err)
	}
	if n := catalogEvents(t, pool); n != 0 {
		t.Fatalf("%d catalog events stored by an import asked to stop", n)
	}
}
