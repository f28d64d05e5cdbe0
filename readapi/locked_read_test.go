package readapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A data request whose read waits on a read model's table another transaction holds (an
// operator's LOCK TABLE or ALTER TABLE, `kyapi rebuild` of usage, which empties rm_usage_daily
// in its one transaction) is answered 503, outcome none, nothing charged, once the read's
// bound has passed, and lets go of its connection. Unbounded, such reads waited for as long as
// the table was held, each on a connection of the pool: as many of them as the pool has
// connections (from any key, one without credits too: the read comes before the 402) left
// every other request of the process, on any table, and its charges, waiting with them, and
// their goroutines piling up for as long as their clients waited.
func TestReadsWaitingOnAHeldTableAreRefusedAndLetGoOfThePool(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := newStackOn(t, pool)
	s.listenForKeys()
	held, heldKey := s.customer(500)
	_, payingKey := s.customer(500)
	for _, key := range []string{heldKey, payingKey} { // both keys cached, as a busy process has them
		s.get(key, "/api/data/places/lex-books")
	}
	before := s.balance(held)

	// The test's own connection, not one of the pool's.
	lock, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE rm_towns IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	// Twice as many requests for the held table as the pool has connections.
	const blocked = 8
	type answer struct {
		status  int
		outcome string
		err     error
	}
	answers := make(chan answer, blocked)
	for range blocked {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, s.server.URL+"/api/data/towns", nil)
			req.Header.Set("Authorization", "Bearer "+heldKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			_ = resp.Body.Close()
			answers <- answer{status: resp.StatusCode, outcome: resp.Header.Get(httpx.ChargeOutcomeHeader)}
		}()
	}
	released := false
	guard := time.After(2 * time.Minute) // only so that the unbounded wait fails rather than hangs
	for i := range blocked {
		var a answer
		select {
		case a = <-answers:
		case <-guard:
			// Never answered while the table was held: let go of it to see what they get then.
			_ = tx.Rollback(ctx)
			released = true
			a = <-answers
		}
		if released || a.err != nil || a.status != http.StatusServiceUnavailable || a.outcome != httpx.OutcomeNone {
			t.Fatalf("request %d for the held table: status %d, outcome %q, error %v, answered only once the table was let go: %v; "+
				"want 503, outcome none, while it is held", i+1, a.status, a.outcome, a.err, released)
		}
	}
	if b := s.balance(held); b != before {
		t.Fatalf("balance %d after requests answered 503 none, want %d", b, before)
	}
	// The table is still held, and the pool serves every other request: read, charged, answered.
	r := s.get(payingKey, "/api/data/places/lex-coffee")
	if _, m := r.object(t); m.CreditsUsed != 1 {
		t.Fatalf("place detail while another table is held: meta %+v, want it charged 1 credit", m)
	}
}
