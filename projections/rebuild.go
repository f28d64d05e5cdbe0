package projections

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/eventstore"
)

// Rebuild empties the read model and replays the store from position 0 up to the head it
// finds at the start (kyapi rebuild). It returns the events it counted, as CatchUp does.
//
// An applier whose ranges add to the same rows (usage: a row per place and UTC day, which
// every range of charges touches again) is rebuilt in one transaction with its checkpoint,
// summing the ranges in memory (rangeBuffer) and writing each row once per buffer instead of
// once per range; a rebuild that fails leaves it as it was, and while it runs a server left
// running sees its projections wait (the transaction holds back the snapshot horizon) and its
// reads of the table wait (the table is truncated in that transaction).
// Every other applier is reset, then caught up range by range, a transaction each: in one
// transaction a row updated in every range (an account's balance) would keep every version
// of itself, unprunable until the commit, and each update would walk them all.
func (p SQL) Rebuild(ctx context.Context, batchSize int, report func(applied int, at eventstore.Position)) (int, error) {
	b, ok := p.Applier.(bufferedApplier)
	if !ok {
		if err := p.Reset(ctx); err != nil {
			return 0, err
		}
		return CatchUp(ctx, p.Pool, p, batchSize, report)
	}
	// The head must be visible before the checkpoint row is locked: a serving process's
	// group may hold a transaction (with an id below the head's events) that waits for this
	// very row, and waiting for the head under the lock would wait for it forever. So the
	// head is read first, then every transaction that could precede it is waited for
	// (SettledPosition): read after the wait, the head could be an event committed by a
	// transaction with a later id than a group's that started meanwhile.
	head, err := eventstore.GlobalHead(ctx, p.Pool)
	if err != nil {
		return 0, err
	}
	if _, err := eventstore.SettledPosition(ctx, p.Pool); err != nil {
		return 0, err
	}
	total := 0
	err = pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		if _, err := readCheckpoint(ctx, tx, p.Name(), true); err != nil {
			return err
		}
		if err := p.Applier.Reset(ctx, tx); err != nil {
			return err
		}
		buf := b.rebuildBuffer()
		var at eventstore.Position
		if at.Less(head) {
			var err error
			at, total, err = replay(ctx, p.Pool, p.Name(), at, batchSize, p.eventTypes(), head, report, func(r readAhead) error {
				if err := buf.add(ctx, tx, r.events); err != nil {
					return fmt.Errorf("projection %s: %w", p.Name(), err)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		if err := buf.flush(ctx, tx); err != nil {
			return fmt.Errorf("projection %s: %w", p.Name(), err)
		}
		return writeCheckpoint(ctx, tx, p.Name(), at)
	})
	return total, err
}

// bufferedApplier is an applier whose ranges add to the same rows: in a rebuild it sums them
// in a rangeBuffer, and writes when the buffer is full and at the end.
type bufferedApplier interface {
	rebuildBuffer() rangeBuffer
}

// rangeBuffer takes the ranges of a rebuild, in order, inside its transaction.
type rangeBuffer interface {
	add(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error
	flush(ctx context.Context, tx pgx.Tx) error
}
