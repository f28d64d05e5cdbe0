package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/internal/apptest"
)

// Two operators (two sessions) shown the rotate form naming the live key K1, who send it at
// about the same time, rotate once: a second rotation would revoke K1, the customer's live
// key, at once. The form's key is checked under the account's lock (docs/operations.md).
func TestTwoSessionsRotatingTogetherRotateOnce(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Race Co", "race@example.com")
	_, live := issueViaAdmin(t, svc, id)

	a, aCSRF := signedInConsole(t, svc)
	b, bCSRF := signedInConsole(t, svc)

	// Hold the account's row, as a charge batch or a purchase would for a moment: both
	// rotations have passed the form check and wait for it.
	pool, tx := lockAccount(t, svc, id)
	type answer struct {
		status int
		err    error
	}
	send := func(c *http.Client, csrf string) <-chan answer {
		form := issueFormOf(t, c, svc, id, csrf)
		out := make(chan answer, 1)
		go func() {
			resp, err := c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/keys", form)
			if err != nil {
				out <- answer{err: err}
				return
			}
			resp.Body.Close()
			out <- answer{status: resp.StatusCode}
		}()
		return out
	}
	ra, rb := send(a, aCSRF), send(b, bCSRF)
	for i := 0; ; i++ {
		var waiting int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM accounts WHERE account_id = $1 FOR UPDATE%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= 2 {
			break
		}
		if i > 3000 {
			// Only one got as far as the account: the other was refused up front (what is wanted).
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	statuses := map[int]int{}
	for _, r := range []<-chan answer{ra, rb} {
		x := <-r
		if x.err != nil {
			t.Fatal(x.err)
		}
		statuses[x.status]++
	}
	if statuses[http.StatusSeeOther] != 1 || statuses[http.StatusBadRequest] != 1 {
		t.Errorf("answers %v, want one rotation (303) and one form refused as stale (400)", statuses)
	}
	st, body := svc.Admin(t, http.MethodGet, "/admin/accounts/"+id, "")
	if st != http.StatusOK {
		t.Fatalf("get account: %d %s", st, body)
	}
	if st, b := svc.Read(t, "/api/data/towns", live); st == http.StatusForbidden || st == http.StatusUnauthorized {
		t.Errorf("two operators sending the same rotate form revoked the customer's live key at once: %d %s; keys: %s",
			st, strings.TrimSpace(b), body)
	}
}

// A browser that gets a second click on a submit button abandons the first request (it
// closes the connection) and sends the form again. docs/operations.md promises that the
// second answer "leads to the first one's key". Here the first request is still waiting on
// the account (a charge batch holds it) when it is abandoned.
func TestADoubleClickWhoseFirstRequestIsAbandonedStillLeadsToAKey(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Dbl Co", "dbl@example.com")
	issueViaAdmin(t, svc, id)
	c, csrf := signedInConsole(t, svc)
	form := issueFormOf(t, c, svc, id, csrf)

	pool, tx := lockAccount(t, svc, id)
	waitingOnAccount := func() int {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM accounts WHERE account_id = $1 FOR UPDATE%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// First click: waits on the account.
	ctx1, cancel1 := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx1, http.MethodPost, svc.AdminURL+"/console/accounts/"+id+"/keys", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	for i := 0; waitingOnAccount() < 1; i++ {
		if i > 2000 {
			t.Fatal("the first request never reached the account")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Second click: the same form; the browser abandons the first request.
	second := make(chan *http.Response, 1)
	go func() {
		resp, err := c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/keys", form)
		if err != nil {
			t.Error(err)
			second <- nil
			return
		}
		second <- resp
	}()
	time.Sleep(300 * time.Millisecond) // the second request is waiting for the first one's issue
	cancel1()
	<-first
	time.Sleep(300 * time.Millisecond)
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp := <-second
	if resp == nil {
		return
	}
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusSeeOther {
		msg := body
		if i := strings.Index(body, `id="error">`); i >= 0 {
			msg = body[i : i+strings.Index(body[i:], "</p>")]
		}
		t.Fatalf("second click of a double click: %d, want 303 to the issued key; page says %s", resp.StatusCode, msg)
	}
}

// lockAccount holds the account's row in a transaction of its own (rolled back at the end of
// the test, or before by the test), and returns it with a pool on the service's database.
func lockAccount(t *testing.T, svc *apptest.Service, id string) (*pgxpool.Pool, pgx.Tx) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), svc.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	if _, err := tx.Exec(context.Background(), `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	return pool, tx
}
