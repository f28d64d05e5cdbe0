package adminapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// asyncResult is an admin answer read off the test goroutine (no t.Fatal there).
type asyncResult struct {
	status int
	raw    string
	err    error
}

func (f *fixture) callAsync(method, path, body string) <-chan asyncResult {
	out := make(chan asyncResult, 1)
	go func() {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, f.srv.URL+path, rd)
		if err != nil {
			out <- asyncResult{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			out <- asyncResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		out <- asyncResult{status: resp.StatusCode, raw: string(b), err: err}
	}()
	return out
}

// waitForLockWaiters waits until n sessions of this test's database wait on a lock.
func (f *fixture) waitForLockWaiters(n int) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var waiting int
		if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			f.t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.t.Fatalf("fewer than %d sessions came to wait on a lock", n)
}

// waitForGrantAskingForKeyGrantLock waits until a grant asks for the key/grant advisory lock
// alone, as it does until every key change already asked for has committed (it asks again
// rather than queue, so it is not always seen waiting on a lock).
func (f *fixture) waitForGrantAskingForKeyGrantLock() {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var asking bool
		if err := f.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
				AND query LIKE '%advisory_xact_lock($1)%' AND state <> 'idle')`).Scan(&asking); err != nil {
			f.t.Fatal(err)
		}
		if asking {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.t.Fatal("no grant came to ask for the key/grant lock")
}

func ledgerTypes(t *testing.T, f *fixture, acc string) []string {
	t.Helper()
	l := f.call("GET", "/admin/accounts/"+acc+"/ledger", "")
	f.expect(l, 200, "")
	var out []string
	for _, e := range l.body["data"].([]any) {
		e := e.(map[string]any)
		out = append(out, e["type"].(string)+"@"+e["recorded_at"].(string))
	}
	return out
}

// A grant credits the accounts "with an active or grace key", meaning a key usable at the
// moment the grant was first asked for (docs/api.md, "Admin API"). Here a revoke is asked for at
// t0+1h and waits on the account's lock (held by another transaction, as a charge batch or a
// purchase would); the grant is asked for at t0+1h1m. The grant must wait for the revoke in
// flight and so not credit the account: its only key was revoked before the grant.
func TestAGrantDoesNotCreditAnAccountWhoseKeyWasRevokedBeforeIt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	acc := f.openAccount("Revoked Before Outage")
	key := f.issueKey(acc)["key_id"].(string)
	other := f.openAccount("Innocent Bystander")
	f.issueKey(other)

	tx := f.holdAccountLock(acc)

	f.clock.Advance(time.Hour)
	revoke := f.callAsync("POST", "/admin/accounts/"+acc+"/keys/"+key+"/revoke", `{"reason":"leaked"}`)
	f.waitForLockWaiters(1)
	f.clock.Advance(time.Minute)
	grant := f.callAsync("POST", "/admin/bonus-grants", `{"outage_id":"out-race-1","credits":250,"reason":"outage"}`)
	f.waitForGrantAskingForKeyGrantLock()

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rv, gr := <-revoke, <-grant
	if rv.err != nil || rv.status != 200 || gr.err != nil || gr.status != 201 {
		t.Fatalf("revoke %d %s %v; grant %d %s %v", rv.status, rv.raw, rv.err, gr.status, gr.raw, gr.err)
	}
	if b := num(f.call("GET", "/admin/accounts/"+acc, "").data()["balance"]); b != 0 {
		t.Errorf("the account whose only key was revoked at t0+1h got the bonus of the grant asked for at t0+1h1m: balance %d, want 0\nledger: %v\ngrant: %s",
			b, ledgerTypes(t, f, acc), gr.raw)
	}
	if b := num(f.call("GET", "/admin/accounts/"+other, "").data()["balance"]); b != 250 {
		t.Errorf("the account with a usable key: balance %d, want 250", b)
	}
}

// The converse: a key issued at t0+1h (its call waiting on the account's lock) before a grant
// asked for at t0+1h1m makes the account eligible. The grant waits for the issue in flight
// and credits the account; asking for the grant again changes nothing.
func TestAGrantCreditsAnAccountWhoseKeyWasIssuedBeforeIt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	acc := f.openAccount("Key Issued Before Outage")
	other := f.openAccount("Innocent Bystander")
	f.issueKey(other)

	tx := f.holdAccountLock(acc)

	f.clock.Advance(time.Hour)
	issue := f.callAsync("POST", "/admin/accounts/"+acc+"/keys", "")
	f.waitForLockWaiters(1)
	f.clock.Advance(time.Minute)
	grant := f.callAsync("POST", "/admin/bonus-grants", `{"outage_id":"out-race-2","credits":250,"reason":"outage"}`)
	f.waitForGrantAskingForKeyGrantLock()

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	is, gr := <-issue, <-grant
	if is.err != nil || is.status != 201 || gr.err != nil || gr.status != 201 {
		t.Fatalf("issue %d %s %v; grant %d %s %v", is.status, is.raw, is.err, gr.status, gr.raw, gr.err)
	}
	f.expect(f.call("POST", "/admin/bonus-grants", `{"outage_id":"out-race-2","credits":250,"reason":"outage"}`), 200, "")
	d := f.call("GET", "/admin/accounts/"+acc, "").data()
	if b := num(d["balance"]); b != 250 {
		t.Errorf("the account with a key issued at %v, before the grant asked for at %s, got no bonus: balance %d, want 250\nledger: %v",
			d["keys"].([]any)[0].(map[string]any)["issued_at"], t0.Add(time.Hour+time.Minute).Format(time.RFC3339), b, ledgerTypes(t, f, acc))
	}
}

// A key change that a grant did not wait for is recorded after the grant's instant, even on
// a clock that has not moved since: it never makes the account look eligible for a grant
// that did not credit it.
func TestAKeyIssuedAfterAGrantIsRecordedAfterIt(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("After The Outage")
	f.expect(f.call("POST", "/admin/bonus-grants", `{"outage_id":"out-same-instant","credits":250}`), 201, "")
	f.issueKey(acc) // the clock still reads the grant's instant
	d := f.call("GET", "/admin/accounts/"+acc, "").data()
	issued, err := time.Parse(time.RFC3339Nano, d["keys"].([]any)[0].(map[string]any)["issued_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if !issued.After(t0) {
		t.Errorf("a key issued after the grant of %s is recorded at %s, which the grant's rule reads as before it", t0, issued)
	}
	if b := num(d["balance"]); b != 0 {
		t.Errorf("balance %d, want 0: the key came after the grant", b)
	}
}

// Two payment references or outage ids that differ are never taken for one (docs/api.md): a
// reference that differs from a recorded one only by white space at an end would be
// answered as its replay, and the money paid not credited. Such a reference is refused.
func TestReferencesThatDifferOnlyBySpacesAreRefusedNotTakenForOne(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Spacey Buyer")
	path := "/admin/accounts/" + acc + "/purchases"
	f.expect(f.call("POST", path, `{"amount_cents":500,"payment_ref":"pay-7"}`), 201, "")
	for _, ref := range []string{"pay-7 ", " pay-7", "pay-7\u00a0", "pay-7\t", "\u200bpay-7", " "} {
		body, _ := json.Marshal(map[string]any{"amount_cents": 2500000, "payment_ref": ref})
		expectRefused(f, f.call("POST", path, string(body)), "payment_ref")
	}
	f.expect(f.call("POST", "/admin/bonus-grants", `{"outage_id":"out-7","credits":5}`), 201, "")
	expectRefused(f, f.call("POST", "/admin/bonus-grants", `{"outage_id":"out-7 ","credits":5}`), "outage_id")
	f.expect(f.call("POST", path, `{"amount_cents":500,"payment_ref":"pay 8"}`), 201, "") // inner spaces are the reference's own
	if b := num(f.call("GET", "/admin/accounts/"+acc, "").data()["balance"]); b != 2000 {
		t.Errorf("balance %d, want 2000 (two purchases of 1000 credits)", b)
	}
}

// Concurrent retries of one purchase, the same payment_ref on two accounts at once, and
// concurrent calls of one bonus grant: money is added exactly once.
func TestConcurrentRetriesAddMoneyOnce(t *testing.T) {
	f := newFixture(t)
	a, b := f.openAccount("A"), f.openAccount("B")
	f.issueKey(a)
	f.issueKey(b)
	const n = 12
	var chans []<-chan asyncResult
	for i := range n {
		acc := a
		if i%2 == 1 {
			acc = b
		}
		chans = append(chans, f.callAsync("POST", "/admin/accounts/"+acc+"/purchases", `{"amount_cents":500,"payment_ref":"shared"}`))
		chans = append(chans, f.callAsync("POST", "/admin/accounts/"+a+"/purchases", `{"amount_cents":700,"payment_ref":"retry"}`))
		chans = append(chans, f.callAsync("POST", "/admin/bonus-grants", `{"outage_id":"o-conc","credits":3}`))
	}
	statuses := map[string]int{}
	for i, c := range chans {
		r := <-c
		if r.err != nil {
			t.Fatal(r.err)
		}
		statuses[fmt.Sprintf("%d:%d", i%3, r.status)]++
		if r.status >= 500 {
			t.Errorf("5xx: %s", r.raw)
		}
	}
	if statuses["0:201"] != 1 || statuses["0:200"]+statuses["0:400"] != n-1 || statuses["1:201"] != 1 || statuses["1:200"] != n-1 {
		t.Errorf("statuses (call kind:status): %v", statuses)
	}
	ba := num(f.call("GET", "/admin/accounts/"+a, "").data()["balance"])
	bb := num(f.call("GET", "/admin/accounts/"+b, "").data()["balance"])
	if ba+bb != 1000+1400+3+3 {
		t.Errorf("balances %d + %d, want %d in all", ba, bb, 1000+1400+6)
	}
}

// expectRefused expects a 400 bad_request whose message names field.
func expectRefused(f *fixture, r response, field string) {
	f.t.Helper()
	f.expect(r, 400, "bad_request")
	if !strings.Contains(r.body["error"].(string), field) {
		f.t.Errorf("the 400 does not name %s: %s", field, r.raw)
	}
}

// holdAccountLock locks the account's row in a transaction of its own, as a charge batch or
// a purchase would for a moment; commit or roll it back to let the waiters on.
func (f *fixture) holdAccountLock(accountID string) pgx.Tx {
	f.t.Helper()
	tx, err := f.pool.Begin(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { tx.Rollback(context.Background()) })
	if _, err := tx.Exec(context.Background(), `SELECT 1 FROM accounts WHERE account_id = $1 FOR UPDATE`, accountID); err != nil {
		f.t.Fatal(err)
	}
	return tx
}
