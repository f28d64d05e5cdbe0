package eventstore

import (
	"context"
	"fmt"
)

// StoreID is the identity of this event store: a random id drawn once, by migration 0032, and
// never changed. A copy of the database (a dump restored, a base backup) keeps it, since it
// holds the same events at the same positions; another database has its own. What is built
// from the store outside it (the place index) records it, so as not to be taken for another
// store's (docs/operations.md).
func StoreID(ctx context.Context, q Querier) (string, error) {
	var id string
	if err := q.QueryRow(ctx, `SELECT store_id::text FROM event_store_identity`).Scan(&id); err != nil {
		return "", fmt.Errorf("eventstore: reading the store's identity: %w", err)
	}
	return id, nil
}
