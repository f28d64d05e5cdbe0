package audit_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// Real commands only: two meters (B's clock 1.5 s ahead of A's) charge two accounts across UTC
// midnight with every operation, partial list pages, per-row and detail dedups, key rotations
// (one during grace, one issued with no active key while another is in grace), a bonus grant;
// then every audit shape (whole, -account, small segments, position ranges) must be clean.
func TestARealHistoryAcrossMidnightWithEveryOperationAuditsCleanInEveryShape(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := eventstore.New(pool)
	var mu sync.Mutex
	at := time.Date(2026, 11, 23, 23, 59, 58, 0, time.UTC)
	clockA := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	clockB := func() time.Time { mu.Lock(); defer mu.Unlock(); return at.Add(1500 * time.Millisecond) }
	tick := func(d time.Duration) { mu.Lock(); at = at.Add(d); mu.Unlock() }
	acc := commands.Accounts{Store: store, Clock: clockA}
	ma := commands.NewMeter(store, clockA, commands.MeterOptions{})
	mb := commands.NewMeter(store, clockB, commands.MeterOptions{})
	defer ma.Close()
	defer mb.Close()
	open := func(cents int64) (string, string) {
		id, err := acc.OpenAccount(ctx, "Co", "co@test.example", eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		k, err := acc.IssueKey(ctx, id, eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Purchase(ctx, id, cents, "pay-"+id, eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
		return id, k.APIKey
	}
	rich, richKey := open(2_500_000)
	poor, poorKey := open(500) // 1000 credits: lists go partial
	callers := map[string]string{rich: richKey, poor: poorKey}
	activeID := ""
	charge := func(m *commands.Meter, id string, op domain.Operation, res ...string) {
		c, err := m.Authenticate(ctx, domain.HashKey(callers[id]))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = m.Charge(ctx, commands.ChargeRequest{Caller: c, Operation: op, Resources: res})
	}
	for i := 0; i < 700; i++ {
		m := ma
		if i%3 == 0 {
			m = mb
		}
		id := rich
		if i%2 == 1 {
			id = poor
		}
		p := func(n int) string { return domain.PlaceResource(fmt.Sprint("p", n)) }
		switch i % 9 {
		case 0:
			var rows []string
			for j := 0; j < 60; j++ {
				rows = append(rows, p((i*60+j)%997))
			}
			rows = append(rows, rows[3]) // the same place twice in a page
			charge(m, id, domain.OpPlaceList, rows...)
		case 1:
			charge(m, id, domain.OpPlaceDetail, p(i%60))
		case 2:
			charge(m, id, domain.OpPlaceMenu, domain.MenuResource(fmt.Sprint("p", i%5)))
		case 3:
			charge(m, id, domain.OpReviews, domain.ReviewsResource(fmt.Sprint("p", i%5)))
		case 4:
			charge(m, id, domain.OpRelated, domain.RelatedResource(fmt.Sprint("p", i%5)))
		case 5:
			charge(m, id, domain.OpTowns, domain.TownsResource)
		case 6:
			charge(m, id, domain.OpTrending, domain.TrendingResource)
		case 7:
			charge(m, id, domain.OpHiddenGems, domain.HiddenGemsResource("lex", 10))
		case 8:
			charge(m, id, domain.OpSearch, p(i%60), p((i+1)%60))
			charge(m, id, domain.OpEvents, domain.EventsResource("", "2026-11-24", "2026-11-30"))
		}
		switch i {
		case 150, 160: // a rotation, then a second one during grace
			k, err := acc.IssueKey(ctx, rich, eventstore.Metadata{})
			if err != nil {
				t.Fatal(err)
			}
			callers[rich], activeID = k.APIKey, k.KeyID
		case 200: // revoke the active key, issue one with none active (the grace key keeps its grace), rotate it
			if err := acc.RevokeKey(ctx, rich, activeID, "test", eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
			for j := 0; j < 2; j++ {
				k, err := acc.IssueKey(ctx, rich, eventstore.Metadata{})
				if err != nil {
					t.Fatal(err)
				}
				callers[rich] = k.APIKey
			}
		case 250:
			if _, err := acc.GrantBonus(ctx, "outage-1", 100, "test", eventstore.Metadata{}); err != nil {
				t.Fatal(err)
			}
		}
		tick(7 * time.Millisecond)
	}
	catchUp(t, pool)
	var head int64
	if err := pool.QueryRow(ctx, `SELECT max(position) FROM events`).Scan(&head); err != nil {
		t.Fatal(err)
	}
	var partial, dedup, days int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE payload::text LIKE '%"omitted"%'), count(*) FILTER (WHERE payload::text LIKE '%"dedup"%'),
		count(DISTINCT (recorded_at AT TIME ZONE 'UTC')::date) FROM events`).Scan(&partial, &dedup, &days); err != nil {
		t.Fatal(err)
	}
	// The history holds what the audit's rules are about: partial pages, dedups, two UTC days.
	if partial == 0 || dedup == 0 || days < 2 {
		t.Fatalf("setup: %d partial pages, %d charges with dedups, %d UTC days; want some of each and two days", partial, dedup, days)
	}
	for _, o := range []audit.Options{{}, {AccountID: rich}, {AccountID: poor}, {SegmentEvents: 256}, {AccountID: rich, SegmentEvents: 256},
		{FromPosition: head / 3}, {FromPosition: head / 2, ToPosition: head - 50}} {
		if rep, out := run(t, pool, o); len(rep.Differences) != 0 {
			t.Errorf("audit %+v: %s", o, strings.TrimSpace(out))
		}
	}
}
