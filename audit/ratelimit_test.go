package audit_test

import (
	"strings"
	"testing"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// RateLimitSet moves no credits: the audit folds it like any other account event, checks its
// chain and balance_after, and finds an edited one.
func TestAuditFoldsRateLimitChangesAndNamesAnEditedOne(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 5)
	limit := int64(300)
	if err := w.accounts.SetRateLimit(ctx, w.account, &limit, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	w.charge(t, "after-limit")
	if err := w.accounts.SetRateLimit(ctx, w.account, nil, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	catchUp(t, pool)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 || rep.Events != 3+5+3 {
		t.Fatalf("consistent database: %+v\n%s", rep, out)
	}
	tamper(t, pool, `UPDATE events SET payload = replace(payload::text, '300', '3000')::json WHERE type = 'RateLimitSet'`)
	rep, out := run(t, pool, audit.Options{})
	if len(rep.Differences) == 0 || !strings.Contains(out, "edited") {
		t.Fatalf("an edited RateLimitSet was not found:\n%s", out)
	}
}
