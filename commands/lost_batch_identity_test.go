package commands_test

import (
	"sync/atomic"
	"testing"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A batch whose connection is lost before its writes reach the server never commits; meanwhile
// another process charges the same account from the same head with the same first charge (the
// same key, resource and balance, at the same recorded time: both clocks behind the head's),
// so its first event is byte for byte the one the lost batch would have written. Finding that
// event does not make the lost batch's later charges of the account paid: the one the other
// process did not write is answered nothing-charged, and what the meter remembers follows the
// ledger.
func TestALostBatchIsNotTakenForCommittedByAnotherProcesssIdenticalFirstEvent(t *testing.T) {
	probe, gs, id, hash, out := lostBatchBesideAnIdenticalCharge(t, "p1", "p2")
	_, _, pairs := paidTwice(t, probe, id)
	l := ledgerOf(t, probe, id)
	if l.charges != 1 || pairs != 1 || !l.consistent() {
		t.Fatalf("ledger %+v, %d resources paid; want the other process's one charge", l, pairs)
	}
	if o := out[1]; o.err == nil {
		t.Fatalf("p2 answered %+v, yet the ledger does not hold it: served without being charged", o.res)
	}
	// The meter's memory follows the ledger: p2 is charged, p1 is free.
	if res, err := gs.charge(hash, domain.OpPlaceList, domain.PlaceResource("p1"), domain.PlaceResource("p2")); err != nil || res.Credits != 1 || len(res.Deduplicated) != 1 {
		t.Fatalf("p1 and p2 again: %+v %v; want p2 paid and p1 free", res.ChargeDecision, err)
	}
	auditClean(t, probe.pool)
}

// A batch decided under the lock whose connection is lost before its writes reach the server
// never commits; meanwhile another process charges the account from the same head with the
// very same charge (the same key, resource and balance, at the same recorded time), so every
// event the lost batch would have written is in the store, byte for byte, written by the
// other. The lost batch must not take them for its own: the other process answered that
// charge, and answering it here too would serve two requests as charged where the ledger holds
// one.
func TestALostBatchIsNotTakenForCommittedByAnotherProcesssIdenticalEvents(t *testing.T) {
	probe, gs, id, hash, out := lostBatchBesideAnIdenticalCharge(t, "p1")
	l := ledgerOf(t, probe, id)
	if l.charges != 1 || !l.consistent() {
		t.Fatalf("ledger %+v; want the other process's one charge", l)
	}
	if o := out[0]; o.err == nil {
		t.Fatalf("p1 answered %+v, yet the one charge in the ledger is the other process's: two requests served as charged, one charge", o.res)
	}
	// The meter's memory follows the ledger: p1 is free.
	if res, err := gs.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p1")); err != nil || res.Credits != 0 {
		t.Fatalf("p1 again: %+v %v; want it free", res.ChargeDecision, err)
	}
	auditClean(t, probe.pool)
}

// lostBatchBesideAnIdenticalCharge runs one batch, decided under the lock, of place-detail
// charges of places by one funded account; its connection is cut before its writes reach the
// server (its transaction rolls back), and meanwhile another process charges the first place
// from the same head at the same recorded time: an event byte for byte the batch's first.
func lostBatchBesideAnIdenticalCharge(t *testing.T, places ...string) (probe stack, gs *gatedStack, id string, hash domain.KeyHash, out []outcome) {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	clk := &clock{now: noon}
	probe = newStack(t, dbURL, clk)
	var other stack
	var batches, fired atomic.Int32
	gs = &gatedStack{entered: make(chan struct{}), release: make(chan struct{})}
	gs.stack = newStack(t, dbURL, clk, commands.MeterOptions{Workers: 1,
		BeforeBatch: func(int) {
			if batches.Add(1) == 1 {
				close(gs.entered)
				<-gs.release
			}
		},
		Hooks: commands.MeterHooks{BeforeWrite: func(cut func()) {
			if batches.Load() != 2 || !fired.CompareAndSwap(0, 1) {
				return
			}
			cut() // nothing of this batch reaches the server; its transaction rolls back
			// The other process charges the first place from the same head, at the same time.
			if res, err := other.charge(hash, domain.OpPlaceDetail, domain.PlaceResource(places[0])); err != nil || res.Credits != 1 {
				t.Errorf("the other process's charge: %+v %v", res, err)
			}
		}}})
	other = newStack(t, dbURL, clk)
	id, key := fundedAccount(t, probe, 500)
	hash = domain.HashKey(key.APIKey)
	_, holderKey := fundedAccount(t, probe, 500)
	var reqs []chargeReq
	for _, p := range places {
		reqs = append(reqs, chargeReq{hash, domain.OpPlaceDetail, []string{domain.PlaceResource(p)}})
	}
	out = gs.oneBatch(t, domain.HashKey(holderKey.APIKey), reqs)
	if fired.Load() != 1 {
		t.Fatal("the batch's connection was not cut")
	}
	return probe, gs, id, hash, out
}
