package commands_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

func rowsOf(prefix string, n int) []string {
	rows := make([]string, n)
	for i := range rows {
		rows[i] = domain.PlaceResource(fmt.Sprint(prefix, i))
	}
	return rows
}

// A charge decided at 23:59:59.999 whose COMMIT is sent after midnight is recorded and
// claimed on the day it was decided; the same resource after midnight is paid again.
func TestAChargeDecidedBeforeMidnightAndCommittedAfterIsOfTheDayItWasDecided(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	midnight := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	clk := &clock{now: midnight.Add(-time.Millisecond)}
	var arm atomic.Bool
	s := newStack(t, dbURL, clk, commands.MeterOptions{Hooks: commands.MeterHooks{BeforeWrite: func(func()) {
		if arm.Load() {
			clk.Advance(2 * time.Millisecond)
		}
	}}})
	id, key := fundedAccount(t, s, 500)
	hash := domain.HashKey(key.APIKey)
	mustCharge(t, s, hash, "warm", 1) // the account is held: the next charge is from memory
	arm.Store(true)
	mustCharge(t, s, hash, "p1", 1)
	arm.Store(false)
	var day string
	if err := s.pool.QueryRow(ctx, `SELECT (max(recorded_at) AT TIME ZONE 'UTC')::date::text FROM events e JOIN accounts a USING (stream_no) WHERE a.account_id = $1`, id).Scan(&day); err != nil {
		t.Fatal(err)
	}
	if day != "2026-11-23" {
		t.Fatalf("recorded on %s", day)
	}
	mustCharge(t, s, hash, "p1", 1) // new day
	mustCharge(t, s, hash, "p1", 0)
	fresh := newStack(t, dbURL, clk)
	mustCharge(t, fresh, hash, "p1", 0)
	mustCharge(t, fresh, hash, "warm", 1)
	if twice, _, _ := paidTwice(t, s, id); len(twice) > 0 {
		t.Fatalf("paid twice: %v", twice)
	}
}

// Chunks over two days, fresh meters, maintenance between.
func TestChunksAcrossDaysRestartsAndMaintenancePayOncePerDay(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	s := newStack(t, dbURL, clk, commands.MeterOptions{MaxClaims: 100})
	id, key := fundedAccount(t, s, 25000)
	_, other := fundedAccount(t, s, 25000)
	hash, ohash := domain.HashKey(key.APIKey), domain.HashKey(other.APIKey)
	rows := rowsOf("p", 700)
	charge := func(st stack, h domain.KeyHash, rs []string, want int64) {
		t.Helper()
		res, err := st.charge(h, domain.OpPlaceList, rs...)
		if err != nil || res.Credits != want {
			t.Fatalf("%s: %d rows: %+v %v; want %d", domain.Day(clk.Now()), len(rs), res.Credits, err, want)
		}
	}
	for day := 0; day < 3; day++ {
		for i := 0; i < 700; i += 50 {
			charge(s, hash, rows[i:i+50], 50)
			charge(s, ohash, rows[i:i+10], 10)
		}
		fresh := newStack(t, dbURL, clk)
		charge(fresh, hash, rows, 0)
		if _, _, err := commands.Maintain(ctx, eventstore.New(s.pool), clk.Now()); err != nil {
			t.Fatal(err)
		}
		fresh2 := newStack(t, dbURL, clk, commands.MeterOptions{MaxClaims: 10})
		charge(fresh2, hash, rows, 0)
		charge(s, hash, rows, 0)
		clk.Advance(24 * time.Hour)
	}
	if twice, _, _ := paidTwice(t, s, id); len(twice) > 0 {
		t.Fatalf("paid twice: %v", len(twice))
	}
	auditClean(t, s.pool)
}
