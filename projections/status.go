package projections

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/eventstore"
)

// MaxLagCounted bounds the count of events a projection is behind: past it the lag is shown
// as this number ("at least").
const MaxLagCounted = 1_000_000

// Status is where a projection stands against the head of the event store.
type Status struct {
	Name       string
	Checkpoint eventstore.Position
	// Lag is the number of committed events after the checkpoint (at most MaxLagCounted).
	Lag int64
	Err error
}

// Members are ps with each Group replaced by its members, each with its own checkpoint.
func Members(ps []Projection) []Projection {
	var each []Projection
	for _, p := range ps {
		if g, ok := p.(Group); ok {
			each = append(each, g.Projections()...)
		} else {
			each = append(each, p)
		}
	}
	return each
}

// Statuses reads each projection's checkpoint (each member's, for a Group) and counts the
// events it has still to apply.
// An error reading one projection is kept in its Status; the others are still read.
func Statuses(ctx context.Context, pool *pgxpool.Pool, ps []Projection) []Status {
	out := make([]Status, 0, len(ps))
	for _, p := range Members(ps) {
		st := Status{Name: p.Name()}
		st.Checkpoint, st.Err = p.Checkpoint(ctx)
		if st.Err == nil {
			st.Lag, st.Err = eventstore.CountAfter(ctx, pool, st.Checkpoint, MaxLagCounted)
		}
		out = append(out, st)
	}
	return out
}
