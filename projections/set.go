package projections

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// SQLAppliers are the read models kept in PostgreSQL, shared by every process. clock
// dates what a read model renders ahead of time (Catalog.Clock).
func SQLAppliers(clock func() time.Time) []SQLApplier {
	return append(accountAppliers(), Catalog{Clock: clock})
}

// accountAppliers are the read models of the accounts' streams.
func accountAppliers() []SQLApplier {
	return []SQLApplier{Balances{}, AccountDays{}, Usage{}}
}

// All returns every projection a serving process runs: the shared SQL read models and,
// when index is not nil, this process's place index.
//
// The account read models (balances, account_days, usage) read the same streams, the
// accounts': they run as one Group, so each range of charges is found and read once.
func All(pool *pgxpool.Pool, index placeindex.Index, clock func() time.Time) []Projection {
	ps := []Projection{
		Group{Pool: pool, Members: accountAppliers()},
		SQL{Pool: pool, Applier: Catalog{Clock: clock}},
	}
	if index != nil {
		ps = append(ps, PlaceIndex{Pool: pool, Index: index})
	}
	return ps
}
