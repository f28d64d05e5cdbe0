package projections

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/eventstore"
)

// Group runs several SQL appliers that read the same streams as one projection: each range is
// found, read and applied once, in one transaction, instead of once per applier. Every member
// keeps its own checkpoint row (audit, archive, rebuild and the status pages read them as
// before), moved together in that transaction. Members whose checkpoints differ (one rebuilt
// alone, say) are carried from the earliest: a member already past part of a range applies
// only the events after its own checkpoint.
type Group struct {
	Pool    *pgxpool.Pool
	Members []SQLApplier
}

// Name names the group by its members ("balances+account_days+usage").
func (g Group) Name() string {
	names := make([]string, len(g.Members))
	for i, m := range g.Members {
		names[i] = m.Name()
	}
	return strings.Join(names, "+")
}

// Projections are the members as projections of their own (for their statuses).
func (g Group) Projections() []Projection {
	out := make([]Projection, len(g.Members))
	for i, m := range g.Members {
		out[i] = SQL{Pool: g.Pool, Applier: m}
	}
	return out
}

// Checkpoint is the earliest of the members' checkpoints: where the group's next range starts.
func (g Group) Checkpoint(ctx context.Context) (eventstore.Position, error) {
	var first eventstore.Position
	for i, m := range g.Members {
		at, err := readCheckpoint(ctx, g.Pool, m.Name(), false)
		if err != nil {
			return first, err
		}
		if i == 0 || at.Less(first) {
			first = at
		}
	}
	return first, nil
}

func (g Group) Handle(ctx context.Context, from, to eventstore.Position) error {
	return g.handle(ctx, from, to, nil)
}

// eventTypes are the members' event types, together; nil (every type) if one reads all.
func (g Group) eventTypes() []string {
	var all []string
	for _, m := range g.Members {
		ts := SQL{Applier: m}.eventTypes()
		if ts == nil {
			return nil
		}
		for _, t := range ts {
			if !slices.Contains(all, t) {
				all = append(all, t)
			}
		}
	}
	return all
}

func (g Group) handleRead(ctx context.Context, from, to eventstore.Position, events []eventstore.Event) error {
	if events == nil {
		events = []eventstore.Event{}
	}
	return g.handle(ctx, from, to, events)
}

// handle applies (from, to] to every member not past it, in one transaction with their
// checkpoints; events are the range's, read ahead, or nil to read them in the transaction.
func (g Group) handle(ctx context.Context, from, to eventstore.Position, events []eventstore.Event) error {
	members := slices.Clone(g.Members)
	// Checkpoint rows are locked in name order, so groups in several processes cannot deadlock.
	slices.SortFunc(members, func(a, b SQLApplier) int { return strings.Compare(a.Name(), b.Name()) })
	return pgx.BeginFunc(ctx, g.Pool, func(tx pgx.Tx) error {
		ats := make([]eventstore.Position, len(members))
		for i, m := range members {
			at, err := readCheckpoint(ctx, tx, m.Name(), true)
			if err != nil {
				return err
			}
			ats[i] = at
		}
		first := slices.MinFunc(ats, func(a, b eventstore.Position) int {
			switch {
			case a.Less(b):
				return -1
			case b.Less(a):
				return 1
			}
			return 0
		})
		if !first.Less(to) {
			return nil // already applied: a redelivery after a lost ack
		}
		// A checkpoint inside the range was moved there by another process (its ranges are
		// cut differently): the range holds every event after it, and each member applies
		// only those after its own checkpoint (memberEvents). One before the range would
		// need events the range does not hold.
		if first.Less(from) {
			return errCheckpointMoved
		}
		read := g.eventTypes()
		if events == nil {
			var err error
			if events, err = eventstore.ReadRangeOf(ctx, tx, streamNames(g.Pool), from, to, read...); err != nil {
				return err
			}
		}
		var facts []accountFact // the range's account facts, decoded once for the members at from
		for i, m := range members {
			if !ats[i].Less(to) {
				continue
			}
			types := SQL{Applier: m}.eventTypes()
			var err error
			if fa, ok := m.(factsApplier); ok && ats[i] == from {
				if facts == nil {
					if facts, err = accountFacts(events); err != nil {
						return fmt.Errorf("projection %s: %w", m.Name(), err)
					}
				}
				err = fa.applyFacts(ctx, tx, factsOf(facts, types, read))
			} else {
				err = m.Apply(ctx, tx, memberEvents(events, from, ats[i], types, read))
			}
			if err != nil {
				return fmt.Errorf("projection %s: %w", m.Name(), err)
			}
			if err := writeCheckpoint(ctx, tx, m.Name(), to); err != nil {
				return err
			}
		}
		return nil
	})
}

// memberEvents are the events of (from, to] a member has still to apply: those after its
// checkpoint, of its types (nil: all). Usually that is every event read: the member is at from
// and reads the group's types.
func memberEvents(events []eventstore.Event, from, after eventstore.Position, types, read []string) []eventstore.Event {
	if after == from && slices.Equal(types, read) {
		return events
	}
	out := make([]eventstore.Event, 0, len(events))
	for _, e := range events {
		if after.Less(e.At()) && (types == nil || slices.Contains(types, e.Type)) {
			out = append(out, e)
		}
	}
	return out
}

// factsOf are the facts of a member's types (nil: all), among facts of the types read.
func factsOf(facts []accountFact, types, read []string) []accountFact {
	if types == nil || slices.Equal(types, read) {
		return facts
	}
	out := make([]accountFact, 0, len(facts))
	for _, f := range facts {
		if slices.Contains(types, f.Type) {
			out = append(out, f)
		}
	}
	return out
}
