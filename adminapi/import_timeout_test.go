package adminapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// net/http's write timeout runs from when the request was read: an import that outlasted it
// (a 64 MiB body of 200,000 records takes about as long on this machine) was committed and
// its answer cut off, so the caller saw an empty reply. Held here on a lock past a short
// write timeout, the import is answered, in full.
func TestAnImportThatOutlastsTheWriteTimeoutIsAnswered(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	f := newFixture(t, func(s *http.Server) { s.WriteTimeout = writeTimeout })
	town := `{"record":"town","slug":"paris","name":"Paris"}`
	f.expect(f.call("POST", "/admin/catalog/import", town), 200, "")

	ctx := context.Background()
	hold, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM streams WHERE stream_id = 'town-paris' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	answer := f.callAsync("POST", "/admin/catalog/import", town)
	f.waitForLockWaiters(1) // then it is held past the write timeout
	time.Sleep(3 * writeTimeout)
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-answer
	if r.err != nil || r.status != http.StatusOK {
		var version int64
		_ = f.pool.QueryRow(ctx, `SELECT version FROM streams WHERE stream_id = 'town-paris'`).Scan(&version)
		t.Fatalf("the import held past the write timeout answered %d, %v; the town's stream is at version %d (2: the import was committed)",
			r.status, r.err, version)
	}
}
