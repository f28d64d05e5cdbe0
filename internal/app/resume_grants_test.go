package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/internal/syncbuf"
)

// A grant left running that cannot be finished when serve starts (a statement failing, the
// database briefly unreachable) is tried again until it is done: tried once, it stayed running
// until someone asked for it again, with one error line to say so.
func TestAGrantThatCannotBeResumedAtStartIsTriedAgain(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	accounts := commands.Accounts{Store: eventstore.New(pool), Clock: time.Now}
	meta := eventstore.Metadata{Actor: "test"}
	const n = 250 // more than one chunk
	for range n {
		id, err := accounts.OpenAccount(ctx, "Acct", "ops@test.example", meta)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := accounts.IssueKey(ctx, id, meta); err != nil {
			t.Fatal(err)
		}
	}
	cut, cancel := context.WithCancel(ctx)
	interrupted := accounts
	interrupted.GrantProgress = func(commands.BonusGrant) { cancel() }
	if _, err := interrupted.GrantBonus(cut, "outage-1", 10, "", meta); err == nil {
		t.Fatal("the interrupted grant reported success")
	}
	cancel()
	if _, err := pool.Exec(ctx, `
		CREATE FUNCTION refuse_grant() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'grant progress refused by the test'; END $$;
		CREATE TRIGGER refuse_grant BEFORE UPDATE ON bonus_grants FOR EACH ROW EXECUTE FUNCTION refuse_grant();`); err != nil {
		t.Fatal(err)
	}

	var logs syncbuf.Buffer
	log := logrus.New()
	log.SetOutput(&logs)
	waits := 0
	resumeGrants(ctx, accounts, log, func(context.Context) bool {
		waits++
		if waits == 1 { // the failure has passed by the next try
			if _, err := pool.Exec(ctx, `DROP TRIGGER refuse_grant ON bonus_grants`); err != nil {
				t.Error(err)
			}
		}
		return waits < 5
	})
	if waits != 1 {
		t.Errorf("resumeGrants waited %d times; want once, after the failed try", waits)
	}
	if g, err := accounts.Grant(ctx, "outage-1"); err != nil || g.State != "done" || g.Accounts != n {
		t.Fatalf("the grant after resuming: %+v %v; want done with %d accounts", g, err, n)
	}
	if got := logs.String(); !strings.Contains(got, "resuming bonus grants; trying again in a minute") {
		t.Errorf("log %q; want the failed try said", got)
	}
}
