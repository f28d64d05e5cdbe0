package eventstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A transaction whose connection is lost after COMMIT was sent tells what became of it: a
// success when it committed, an error when it did not. Its caller answers from that (an admin
// call's 503 "nothing was written" must be true), so a lost answer never reads as a failure of
// a write that was saved.
func TestWithTxFindsOutWhatALostCommitDid(t *testing.T) {
	for _, c := range []struct {
		name          string
		mode          int32
		wantCommitted bool
	}{
		{"committed", pgtest.CutAfterCommit, true},
		{"rolled back", pgtest.CutBeforeCommit, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			cutter, url := pgtest.NewCommitCutter(t, pgtest.NewDatabase(t))
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			store := eventstore.New(pool)
			appendTo(t, store, "s-1", at, event("A", 1)) // the connection's backend is known

			cutter.Arm(c.mode)
			err = store.WithTx(ctx, func(tx pgx.Tx) error {
				heads, err := eventstore.OpenHeads(ctx, tx, true, "s-1")
				if err != nil {
					return err
				}
				_, err = eventstore.Append(ctx, tx, heads["s-1"], at.Add(time.Second), event("B", 2))
				return err
			})
			if cutter.Fired() != c.mode {
				t.Fatalf("the COMMIT was not cut (cut %d)", cutter.Fired())
			}
			events, rerr := eventstore.ReadStream(ctx, pool, "s-1", 0)
			if rerr != nil {
				t.Fatal(rerr)
			}
			committed := len(events) == 2
			if committed != c.wantCommitted {
				t.Fatalf("%d events in the stream; the test wants the transaction committed: %v", len(events), c.wantCommitted)
			}
			switch {
			case committed && err != nil:
				t.Fatalf("the transaction committed, WithTx answered %v", err)
			case !committed && (err == nil || errors.Is(err, eventstore.ErrCommitOutcomeUnknown)):
				t.Fatalf("the transaction rolled back, WithTx answered %v; want the connection's error", err)
			}
		})
	}
}

// When the outcome cannot be found out (the database no longer answers), the error says it is
// unknown, not that nothing was written.
func TestWithTxSaysALostCommitItCannotLookUpIsUnknown(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	cutter, url := pgtest.NewCommitCutter(t, dbURL)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := eventstore.New(pool)
	appendTo(t, store, "s-1", at, event("A", 1))
	restore := eventstore.SetCommitOutcomeWait(time.Second)
	defer restore()
	cutter.Arm(pgtest.CutAfterCommit)
	cutter.RefuseAfterCut() // the database is unreachable once the COMMIT is lost
	err = store.WithTx(ctx, func(tx pgx.Tx) error {
		heads, err := eventstore.OpenHeads(ctx, tx, true, "s-1")
		if err != nil {
			return err
		}
		_, err = eventstore.Append(ctx, tx, heads["s-1"], at.Add(time.Second), event("B", 2))
		return err
	})
	if cutter.Fired() != pgtest.CutAfterCommit || !errors.Is(err, eventstore.ErrCommitOutcomeUnknown) {
		t.Fatalf("cut %d, WithTx answered %v; want ErrCommitOutcomeUnknown", cutter.Fired(), err)
	}
}
