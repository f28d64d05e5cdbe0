package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kyapi/kyapi/adminapi"
	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/console"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

// After `kyapi archive`, the admin API's first ledger page says how many facts are archived
// and the balance brought forward (docs/api.md, "Archived history"). The console's ledger
// says the same, so that it never looks like a complete ledger whose first row does not
// follow from 0.
func TestTheConsoleLedgerOfAnArchivedAccountSaysWhatIsArchived(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, q := range []string{`DO $$ DECLARE p record; BEGIN
		FOR p IN SELECT name FROM kyapi_event_partitions() LOOP EXECUTE format('DROP TABLE %I', p.name); END LOOP; END $$`,
		`UPDATE event_partitioning SET partition_size = 1000`, `SELECT kyapi_ensure_event_partitions()`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	clock := &atomic.Int64{}
	clock.Store(time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC).UnixMicro())
	now := func() time.Time { return time.UnixMicro(clock.Load()).UTC() }
	store := eventstore.New(pool)
	meter := commands.NewMeter(store, now, commands.MeterOptions{})
	t.Cleanup(meter.Close)
	accounts := commands.Accounts{Store: store, Clock: now}
	id, err := accounts.OpenAccount(ctx, "Old Co", "old@example.com", eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := accounts.IssueKey(ctx, id, eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := accounts.Purchase(ctx, id, 1000, "pay-old", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	caller, err := meter.Authenticate(ctx, domain.HashKey(key.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1100 {
		if _, err := meter.Charge(ctx, commands.ChargeRequest{Caller: caller, Operation: domain.OpPlaceDetail,
			Resources: []string{domain.PlaceResource(fmt.Sprint("p", i%13))}}); err != nil {
			t.Fatal(err)
		}
		clock.Add((5 * time.Minute).Microseconds())
	}
	var names []string
	for _, a := range projections.SQLAppliers(time.Now) {
		names = append(names, a.Name())
		p := projections.SQL{Pool: pool, Applier: a}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			if _, err := projections.CatchUp(ctx, pool, p, 1000, nil); err != nil {
				t.Fatal(err)
			}
			cp, _ := p.Checkpoint(ctx)
			head, _ := eventstore.GlobalHead(ctx, pool)
			if !cp.Less(head) || time.Now().After(deadline) {
				break
			}
		}
	}
	if _, err := archive.Archive(ctx, pool, archive.Options{Before: 2000, File: filepath.Join(t.TempDir(), "a.jsonl.gz"),
		Now: now().AddDate(0, 0, 3), Projections: names}); err != nil {
		t.Fatal(err)
	}

	views := commands.Views{Pool: pool}
	// The admin API's answer for the first page.
	admin := httptest.NewServer((&adminapi.Server{Accounts: accounts, Views: views, Token: "tok", Clock: now}).Handler())
	defer admin.Close()
	req, _ := http.NewRequest(http.MethodGet, admin.URL+"/admin/accounts/"+id+"/ledger?limit=20", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	var page struct {
		Archived *struct {
			Facts        int64 `json:"facts"`
			BalanceAfter int64 `json:"balance_after"`
		} `json:"archived"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil || page.Archived == nil {
		t.Fatalf("admin API ledger after archiving: %d %s", resp.StatusCode, body)
	}

	con := &console.Server{Accounts: accounts, Views: views, Pool: pool, Token: "tok", Clock: now}
	srv := httptest.NewServer(con.Handler())
	defer srv.Close()
	c := newClient(t, srv)
	if r, _ := signIn(t, c, srv.URL, "tok"); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", r.StatusCode)
	}
	resp, err = c.Get(srv.URL + "/console/accounts/" + id)
	if err != nil {
		t.Fatal(err)
	}
	html := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("account page: %d %s", resp.StatusCode, html)
	}
	if !strings.Contains(html, `id="ledger-archived"`) || !strings.Contains(html, groupDigits(page.Archived.Facts)+" facts") ||
		!strings.Contains(html, groupDigits(page.Archived.BalanceAfter)+" credits") {
		t.Fatalf("the admin API says the first %d facts of this account are archived (balance brought forward %d); "+
			"the console's ledger page shows the same entries without any word of it", page.Archived.Facts, page.Archived.BalanceAfter)
	}
}

// groupDigits writes n with thousands separators, as the console shows credits.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
