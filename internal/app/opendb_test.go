package app

import (
	"context"
	"testing"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// The service's connections run without JIT compilation: PostgreSQL misjudges a range of the
// global order as millions of rows and compiled each projection read, about a second a time,
// on a large store. Every connection of the pool must have it off, not only the first.
func TestTheServicesConnectionsRunWithoutJIT(t *testing.T) {
	ctx := context.Background()
	pool, err := OpenDB(ctx, Config{DatabaseURL: pgtest.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for range 3 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		var jit string
		if err := c.QueryRow(ctx, `SHOW jit`).Scan(&jit); err != nil {
			t.Fatal(err)
		}
		if jit != "off" {
			t.Fatalf("jit = %q on a connection of the service's pool", jit)
		}
	}
}
