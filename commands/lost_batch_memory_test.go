package commands_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A batch decided from memory (its id not known: BEGIN went with its writes) is lost after its
// writes reached the server, which never commits them (the session is ended while its stream
// update waits); another process then charges the account from the same head with the batch's
// first charge, at the same recorded time, so its event is byte for byte the batch's first.
// The batch's second charge of the account is nowhere: found by content, the account is not
// written (eventstore.Batch.Written wants every event), and both charges are decided again
// under the lock — p1 free (the other process paid it), p2 charged — never p2 answered paid
// with nothing in the ledger.
func TestALostBatchFromMemoryIsNotTakenForWrittenByAnotherProcesssIdenticalFirstEvent(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	probe := newStack(t, dbURL, clk)
	var other stack
	var hash domain.KeyHash
	var id string
	var gate atomic.Bool
	var batches, target, fired atomic.Int32
	gs := &gatedStack{entered: make(chan struct{}), release: make(chan struct{})}
	var helperDone func()
	gs.stack = newStack(t, dbURL, clk, commands.MeterOptions{Workers: 1,
		BeforeBatch: func(int) {
			n := batches.Add(1)
			if gate.CompareAndSwap(true, false) {
				target.Store(n + 1)
				close(gs.entered)
				<-gs.release
			}
		},
		Hooks: commands.MeterHooks{
			BeforeWrite: func(func()) {
				if batches.Load() != target.Load() || !fired.CompareAndSwap(0, 1) {
					return
				}
				// Another session holds the account's stream row: the batch's writes reach the
				// server and wait there, uncommitted.
				tx, err := probe.pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := tx.Exec(ctx, `SELECT 1 FROM streams WHERE stream_no = (SELECT stream_no FROM accounts WHERE account_id = $1) FOR UPDATE`, id); err != nil {
					t.Error(err)
				}
				helperDone = func() { _ = tx.Rollback(ctx) }
			},
			AfterCommitSent: func(pid uint32, _ func()) {
				if fired.Load() != 1 || helperDone == nil {
					return
				}
				fired.Store(2)
				defer func() { helperDone(); helperDone = nil }()
				waitFor := func(q string) {
					for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
						var ok bool
						if err := probe.pool.QueryRow(ctx, q, int64(pid)).Scan(&ok); err != nil {
							t.Error(err)
							return
						}
						if ok {
							return
						}
						if time.Now().After(deadline) {
							t.Errorf("timed out: %s", q)
							return
						}
					}
				}
				waitFor(`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`)
				if _, err := probe.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, int64(pid)); err != nil {
					t.Error(err)
				}
				waitFor(`SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`)
				helperDone()
				helperDone = func() {}
				// The other process charges p1 from the same head, at the same time.
				if res, err := other.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p1")); err != nil || res.Credits != 1 {
					t.Errorf("the other process's charge: %+v %v", res, err)
				}
			},
		}})
	other = newStack(t, dbURL, clk)
	var key commands.IssuedKey
	id, key = fundedAccount(t, probe, 500)
	hash = domain.HashKey(key.APIKey)
	_, holderKey := fundedAccount(t, probe, 500)
	// The meter holds the account: its next batch is decided from memory.
	if res, err := gs.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p0")); err != nil || res.Credits != 1 {
		t.Fatalf("p0: %+v %v", res, err)
	}
	gate.Store(true)
	out := gs.oneBatch(t, domain.HashKey(holderKey.APIKey), []chargeReq{
		{hash, domain.OpPlaceDetail, []string{domain.PlaceResource("p1")}},
		{hash, domain.OpPlaceDetail, []string{domain.PlaceResource("p2")}},
	})
	if fired.Load() != 2 {
		t.Fatalf("the batch's session was not ended (%d)", fired.Load())
	}
	twice, _, pairs := paidTwice(t, probe, id)
	l := ledgerOf(t, probe, id)
	if len(twice) != 0 || pairs != 3 || l.charges != 3 || !l.consistent() {
		t.Fatalf("ledger %+v, %d resources paid (twice: %v); want p0, the other process's p1, and p2", l, pairs, twice)
	}
	if out[0].err != nil || out[0].res.Credits != 0 {
		t.Fatalf("p1 answered %+v %v; want it free: the other process paid it", out[0].res, out[0].err)
	}
	if out[1].err != nil || out[1].res.Credits != 1 {
		t.Fatalf("p2 answered %+v %v; want it charged", out[1].res, out[1].err)
	}
	auditClean(t, probe.pool)
}
