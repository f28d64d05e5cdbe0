package eventstore_test

import (
	"context"
	"testing"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// Every database holds an event store of its own identity, drawn once and never changed: what
// is built from the store elsewhere (the place index) records it to tell one store from another.
func TestEachStoreHasAnIdentityOfItsOwnThatNeverChanges(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.NewPool(t), pgtest.NewPool(t)
	idA, err := eventstore.StoreID(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	idB, err := eventstore.StoreID(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if idA == "" || idA == idB {
		t.Errorf("two databases' store identities: %q and %q; want two different ones", idA, idB)
	}
	if again, err := eventstore.StoreID(ctx, a); err != nil || again != idA {
		t.Errorf("the store's identity read again = %q, %v; want %q", again, err, idA)
	}
	for _, sql := range []string{
		`UPDATE event_store_identity SET store_id = gen_random_uuid()`,
		`DELETE FROM event_store_identity`,
		`TRUNCATE event_store_identity`,
		`INSERT INTO event_store_identity DEFAULT VALUES`,
	} {
		if _, err := a.Exec(ctx, sql); err == nil {
			t.Errorf("%s: accepted", sql)
		}
	}
	if again, err := eventstore.StoreID(ctx, a); err != nil || again != idA {
		t.Errorf("the store's identity after attempts to change it = %q, %v; want %q", again, err, idA)
	}
}
