package projections

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// SQLAppliers are the read models kept in PostgreSQL, shared by every process. clock
// dates what a read model renders ahead of time (Catalog.Clock).
func SQLAppliers(clock func() time.Time) []SQLApplier {
	return []SQLApplier{Balances{}, AccountDays{}, Usage{}, Catalog{Clock: clock}}
}

// All returns every projection a serving process runs: the shared SQL read models and,
// when index is not nil, this process's place index.
func All(pool *pgxpool.Pool, index placeindex.Index, clock func() time.Time) []Projection {
	var ps []Projection
	for _, a := range SQLAppliers(clock) {
		ps = append(ps, SQL{Pool: pool, Applier: a})
	}
	if index != nil {
		ps = append(ps, PlaceIndex{Pool: pool, Index: index})
	}
	return ps
}
