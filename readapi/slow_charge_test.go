package readapi_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// A charge that waits on the account's lock past the server's write timeout is still
// answered: the client gets what it paid for, never a closed connection after a debit.
func TestAChargeThatOutlastsTheWriteTimeoutIsStillAnswered(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The served handler behind a server whose write timeout is short, so that a lock held
	// a little longer outlasts it.
	const writeTimeout = 300 * time.Millisecond
	srv := &http.Server{Handler: s.api.Handler(), WriteTimeout: writeTimeout}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, account); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		status int
		body   []byte
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/api/data/towns", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		done <- answer{status: resp.StatusCode, body: body, err: err}
	}()
	// Once the charge waits for the lock, hold the lock past the write timeout.
	for {
		var waiting bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(3 * writeTimeout)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("answer %d %s, error %v; want the towns, paid", a.status, a.body, a.err)
	}
	if b := s.balance(account); b == 1000 {
		t.Fatalf("answered 200 but nothing was charged (balance %d)", b)
	}
}
