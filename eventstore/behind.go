package eventstore

import (
	"context"
	"strconv"
)

// CountAfter counts the events after the given position in the global order, stopping at
// limit: how far a reader at that position is behind (the console and the metrics show it
// as a projection's lag). Counting stops early so a reader far behind costs no full scan,
// and the ORDER BY keeps it on the global order's index: PostgreSQL estimates such a range at
// a share of the store, and a generic plan without it scanned every partition to find none.
func CountAfter(ctx context.Context, q Querier, after Position, limit int) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT count(*) FROM (
			SELECT 1 FROM events e WHERE (e.transaction_id, e.position) > ($1::text::xid8, $2)
			ORDER BY e.transaction_id, e.position LIMIT $3) b`,
		strconv.FormatUint(after.TxID, 10), after.Pos, limit).Scan(&n)
	return n, err
}
