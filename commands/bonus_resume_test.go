package commands_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// Two grants are left running (cut short, as by a crash); the older one cannot go on (here a
// trigger refuses its progress, as a failing statement would). Resuming must still finish the
// other and name the one it could not: stopping at the first failure left every later grant
// running until someone asked for it again.
func TestResumingGrantsFinishesTheOthersWhenOneFails(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	const n = 350 // more than one chunk
	for range n {
		fundedAccount(t, s, 0)
	}
	for _, outage := range []string{"outage-stuck", "outage-fine"} {
		cut, cancel := context.WithCancel(ctx)
		interrupted := s.accounts
		interrupted.GrantProgress = func(commands.BonusGrant) { cancel() }
		if _, err := interrupted.GrantBonus(cut, outage, 10, "", eventstore.Metadata{}); err == nil {
			t.Fatalf("%s: the interrupted grant reported success", outage)
		}
		cancel()
		clk.now = clk.now.Add(time.Second) // the stuck grant is the older one
	}
	if _, err := s.pool.Exec(ctx, `
		CREATE FUNCTION refuse_stuck_grant() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'grant progress refused by the test'; END $$;
		CREATE TRIGGER refuse_stuck_grant BEFORE UPDATE ON bonus_grants
			FOR EACH ROW WHEN (OLD.outage_id = 'outage-stuck') EXECUTE FUNCTION refuse_stuck_grant();`); err != nil {
		t.Fatal(err)
	}

	err := s.accounts.ResumeGrants(ctx, eventstore.Metadata{})
	if err == nil || !strings.Contains(err.Error(), "outage-stuck") {
		t.Fatalf("resuming: %v; want the error of outage-stuck", err)
	}
	if g, err := s.accounts.Grant(ctx, "outage-fine"); err != nil || g.State != "done" || g.Accounts != n {
		t.Fatalf("outage-fine after resuming: %+v %v; want done with %d accounts", g, err, n)
	}
	if g, _ := s.accounts.Grant(ctx, "outage-stuck"); g.State != "running" {
		t.Fatalf("outage-stuck after resuming: %+v; want still running", g)
	}

	if _, err := s.pool.Exec(ctx, `DROP TRIGGER refuse_stuck_grant ON bonus_grants`); err != nil {
		t.Fatal(err)
	}
	if err := s.accounts.ResumeGrants(ctx, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if g, err := s.accounts.Grant(ctx, "outage-stuck"); err != nil || g.State != "done" || g.Accounts != n {
		t.Fatalf("outage-stuck resumed again: %+v %v; want done with %d accounts", g, err, n)
	}
	auditClean(t, s.pool)
}
