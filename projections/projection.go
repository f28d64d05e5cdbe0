// Package projections builds the read models from the event store: balances, key lookup,
// ledger, daily usage, the catalog tables and the place index. Each projection is driven
// by a Watermill router whose subscriber hands it closed ranges of the global event order;
// the projection applies a range and stores the range's end as its checkpoint in the same
// transaction (or, for the place index, the same index batch), so a crash neither loses nor
// double-applies an event.
package projections

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/eventstore"
)

// Projection is a read model fed with ranges of the global order.
type Projection interface {
	Name() string
	// Checkpoint is the end of the last range applied.
	Checkpoint(ctx context.Context) (eventstore.Position, error)
	// Handle applies the events in (from, to] and records to as the checkpoint, atomically.
	// A range already applied is a no-op.
	Handle(ctx context.Context, from, to eventstore.Position) error
}

// SQLApplier is a read model kept in PostgreSQL tables.
type SQLApplier interface {
	Name() string
	// Apply writes the effect of events inside tx. Events arrive in global order; within
	// one stream a later version may come first (see the event-store notes), so appliers
	// are version-guarded or commutative.
	Apply(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error
	// Reset empties the read model, for a rebuild from position 0.
	Reset(ctx context.Context, tx pgx.Tx) error
}

// TypeFilter is implemented by appliers that only read events of a few types (the account
// events, say): their ranges are read without the others, such as the catalog's large payloads.
type TypeFilter interface {
	EventTypes() []string
}

// errCheckpointMoved means the stored checkpoint is not where the range starts: another
// delivery got there first. The subscriber re-reads the checkpoint and carries on.
var errCheckpointMoved = errors.New("projections: checkpoint is not at the start of the range")

// SQL runs an SQLApplier with its checkpoint row in projection_checkpoints.
type SQL struct {
	Pool    *pgxpool.Pool
	Applier SQLApplier
}

func (p SQL) Name() string { return p.Applier.Name() }

func (p SQL) Checkpoint(ctx context.Context) (eventstore.Position, error) {
	return readCheckpoint(ctx, p.Pool, p.Name(), false)
}

func readCheckpoint(ctx context.Context, q eventstore.Querier, name string, lock bool) (eventstore.Position, error) {
	var tx string
	var pos eventstore.Position
	sql := `SELECT transaction_id::text, position FROM projection_checkpoints WHERE name = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	err := q.QueryRow(ctx, sql, name).Scan(&tx, &pos.Pos)
	if errors.Is(err, pgx.ErrNoRows) {
		if !lock {
			return eventstore.Position{}, nil
		}
		if _, err := q.Exec(ctx, `INSERT INTO projection_checkpoints (name) VALUES ($1) ON CONFLICT DO NOTHING`, name); err != nil {
			return pos, err
		}
		return readCheckpoint(ctx, q, name, true)
	}
	if err != nil {
		return pos, err
	}
	_, err = fmt.Sscan(tx, &pos.TxID)
	return pos, err
}

func writeCheckpoint(ctx context.Context, tx pgx.Tx, name string, at eventstore.Position) error {
	_, err := tx.Exec(ctx, `UPDATE projection_checkpoints SET transaction_id = $2::text::xid8, position = $3, updated_at = now() WHERE name = $1`,
		name, fmt.Sprint(at.TxID), at.Pos)
	return err
}

func (p SQL) Handle(ctx context.Context, from, to eventstore.Position) error {
	return p.handle(ctx, from, to, nil)
}

func (p SQL) eventTypes() []string {
	if f, ok := p.Applier.(TypeFilter); ok {
		return f.EventTypes()
	}
	return nil
}

func (p SQL) handleRead(ctx context.Context, from, to eventstore.Position, events []eventstore.Event) error {
	return p.group().handleRead(ctx, from, to, events)
}

// handle applies (from, to] in one transaction with the checkpoint: a Group of one.
func (p SQL) handle(ctx context.Context, from, to eventstore.Position, events []eventstore.Event) error {
	return p.group().handle(ctx, from, to, events)
}

func (p SQL) group() Group { return Group{Pool: p.Pool, Members: []SQLApplier{p.Applier}} }

// Reset empties the read model and moves its checkpoint back to position 0.
func (p SQL) Reset(ctx context.Context) error {
	return pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		if _, err := readCheckpoint(ctx, tx, p.Name(), true); err != nil {
			return err
		}
		if err := p.Applier.Reset(ctx, tx); err != nil {
			return err
		}
		return writeCheckpoint(ctx, tx, p.Name(), eventstore.Position{})
	})
}

// names holds, per pool (one database each), the cache of stream ids the projections' range
// reads resolve stream numbers with (eventstore.StreamNames).
var names sync.Map // *pgxpool.Pool → *eventstore.StreamNames

func streamNames(pool *pgxpool.Pool) *eventstore.StreamNames {
	if n, ok := names.Load(pool); ok {
		return n.(*eventstore.StreamNames)
	}
	n, _ := names.LoadOrStore(pool, eventstore.NewStreamNames())
	return n.(*eventstore.StreamNames)
}
