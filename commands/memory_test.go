package commands_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// decisions counts how a meter decided its charges (MeterOptions.OnDecided).
type decisions struct{ fromMemory, underLock atomic.Int64 }

func (d *decisions) options() commands.MeterOptions {
	return commands.MeterOptions{OnDecided: func(fromMemory, underLock int) {
		d.fromMemory.Add(int64(fromMemory))
		d.underLock.Add(int64(underLock))
	}}
}

func (d *decisions) take() (fromMemory, underLock int64) {
	return d.fromMemory.Swap(0), d.underLock.Swap(0)
}

func TestAMeterDecidesTheChargesOfAnAccountItHoldsFromMemory(t *testing.T) {
	var d decisions
	s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon}, d.options())
	id, key := fundedAccount(t, s, 500)
	hash := domain.HashKey(key.APIKey)
	if res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p0")); err != nil || res.Credits != 1 {
		t.Fatalf("first charge: %+v %v", res, err)
	}
	if mem, lock := d.take(); mem != 0 || lock != 1 {
		t.Fatalf("first charge decided %d from memory, %d under the lock; want it read under the lock", mem, lock)
	}
	for i := 1; i <= 5; i++ {
		if res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource(fmt.Sprint("p", i))); err != nil || res.Credits != 1 || res.Balance != int64(1000-i-1) {
			t.Fatalf("charge %d: %+v %v", i, res, err)
		}
	}
	// Deduplicated and refused charges are decided from memory too.
	if res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p3")); err != nil || res.Credits != 0 || len(res.Deduplicated) != 1 {
		t.Fatalf("p3 again: %+v %v; want it free", res, err)
	}
	if mem, lock := d.take(); mem != 6 || lock != 0 {
		t.Fatalf("later charges decided %d from memory, %d under the lock; want all 6 from memory", mem, lock)
	}
	if l := ledgerOf(t, s, id); l.balance != 994 || l.charges != 6 || l.dedupd != 1 || !l.consistent() {
		t.Fatalf("ledger %+v", l)
	}
	if s.meter.AccountsHeld() != 1 {
		t.Fatalf("the meter holds %d accounts; want 1", s.meter.AccountsHeld())
	}
	auditClean(t, s.pool)
}

// Whatever changes an account behind a meter that holds it — another process's charge, a
// purchase, a revoke, even a key changed by hand without an event — is seen under the account's
// lock before anything decided from memory is written: the charge is decided again from fresh
// reads.
func TestAnAccountChangedBehindTheMetersBackIsDecidedAgainUnderTheLock(t *testing.T) {
	t.Run("another process charged it", func(t *testing.T) {
		dbURL := pgtest.NewDatabase(t)
		var d decisions
		a := newStack(t, dbURL, &clock{now: noon}, d.options())
		b := newStack(t, dbURL, &clock{now: noon})
		id, key := fundedAccount(t, a, 500)
		hash := domain.HashKey(key.APIKey)
		mustCharge(t, a, hash, "p1", 1)
		mustCharge(t, b, hash, "p2", 1)
		d.take()
		// a's memory says 999 and knows nothing of p2: it must find both out.
		res, err := a.charge(hash, domain.OpPlaceList, domain.PlaceResource("p2"), domain.PlaceResource("p3"))
		if err != nil || res.Credits != 1 || len(res.Deduplicated) != 1 || res.Balance != 997 {
			t.Fatalf("charge on a: %+v %v; want p2 free (paid on b), p3 paid, balance 997", res, err)
		}
		if mem, lock := d.take(); mem != 0 || lock != 1 {
			t.Fatalf("decided %d from memory, %d under the lock; want it decided again under the lock", mem, lock)
		}
		if l := ledgerOf(t, a, id); l.balance != 997 || !l.consistent() {
			t.Fatalf("ledger %+v", l)
		}
		auditClean(t, a.pool)
	})
	t.Run("credits were bought", func(t *testing.T) {
		var d decisions
		s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon}, d.options())
		id, key := fundedAccount(t, s, 0)
		hash := domain.HashKey(key.APIKey)
		if _, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("p1")); !errors.Is(err, domain.ErrInsufficientCredits) {
			t.Fatalf("charge at zero balance: %v; want insufficient credits", err)
		}
		if _, err := s.accounts.Purchase(ctx, id, 500, "pay-later", eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
		d.take()
		// The meter's memory still says 0: a 402 from it would be a refusal the client did not owe.
		mustCharge(t, s, hash, "p1", 1)
		if mem, lock := d.take(); mem != 0 || lock != 1 {
			t.Fatalf("decided %d from memory, %d under the lock; want it decided again under the lock", mem, lock)
		}
	})
	t.Run("the key was revoked", func(t *testing.T) {
		dbURL := pgtest.NewDatabase(t)
		a := newStack(t, dbURL, &clock{now: noon})
		b := newStack(t, dbURL, &clock{now: noon})
		id, key := fundedAccount(t, a, 500)
		hash := domain.HashKey(key.APIKey)
		mustCharge(t, a, hash, "p1", 1)
		c, err := a.meter.Authenticate(ctx, hash)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.accounts.RevokeKey(ctx, id, key.KeyID, "test", eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
		// The caller was authenticated before the revoke: only the charge can refuse it.
		if res, err := a.meter.Charge(ctx, commands.ChargeRequest{Caller: c, Operation: domain.OpPlaceDetail,
			Resources: []string{domain.PlaceResource("p2")}}); !errors.Is(err, domain.ErrKeyRevoked) {
			t.Fatalf("charge after the revoke: %+v %v; want it refused", res, err)
		}
	})
	t.Run("the key was changed by hand", func(t *testing.T) {
		s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon})
		id, key := fundedAccount(t, s, 500)
		hash := domain.HashKey(key.APIKey)
		mustCharge(t, s, hash, "p1", 1)
		c, err := s.meter.Authenticate(ctx, hash)
		if err != nil {
			t.Fatal(err)
		}
		// No event: the head does not move. The key's state is compared all the same.
		if _, err := s.pool.Exec(ctx, `UPDATE api_keys SET state = 'revoked', revoked_at = $2 WHERE key_id = $1`, key.KeyID, noon); err != nil {
			t.Fatal(err)
		}
		if res, err := s.meter.Charge(ctx, commands.ChargeRequest{Caller: c, Operation: domain.OpPlaceDetail,
			Resources: []string{domain.PlaceResource("p2")}}); !errors.Is(err, domain.ErrKeyRevoked) {
			t.Fatalf("charge after the key was revoked by hand: %+v %v; want it refused", res, err)
		}
		if l := ledgerOf(t, s, id); l.balance != 999 {
			t.Fatalf("ledger %+v; want only the first charge", l)
		}
	})
}

// A batch decided from memory whose connection was lost before its writes reached the server is
// decided again under the lock: charged once, answered paid.
func TestABatchFromMemoryThatNeverReachedTheServerIsChargedOnceUnderTheLock(t *testing.T) {
	var armed atomic.Bool
	var d decisions
	opts := d.options()
	opts.Hooks.BeforeWrite = func(cut func()) {
		if armed.CompareAndSwap(true, false) {
			cut()
		}
	}
	s := newStack(t, pgtest.NewDatabase(t), &clock{now: noon}, opts)
	id, key := fundedAccount(t, s, 500)
	hash := domain.HashKey(key.APIKey)
	mustCharge(t, s, hash, "p1", 1)
	d.take()
	armed.Store(true)
	mustCharge(t, s, hash, "p2", 1)
	if mem, lock := d.take(); mem != 0 || lock != 1 {
		t.Fatalf("decided %d from memory, %d under the lock; want the lost batch decided again under the lock", mem, lock)
	}
	if l := ledgerOf(t, s, id); l.balance != 998 || l.charges != 2 || !l.consistent() {
		t.Fatalf("ledger %+v; want two charges", l)
	}
}

func mustCharge(t *testing.T, s stack, hash domain.KeyHash, place string, credits int64) commands.ChargeResult {
	t.Helper()
	res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource(place))
	if err != nil || res.Credits != credits {
		t.Fatalf("charge %s: %+v %v; want %d credits", place, res, err, credits)
	}
	return res
}

// The meter's write appends with kyapi_append's rules: every 256th event of a stream is marked
// with its position and time, and balance-at finds the balance of any instant from the marks.
func TestTheMetersWritesMarkEvery256thEventOfAStream(t *testing.T) {
	clk := &clock{now: noon}
	s := newStack(t, pgtest.NewDatabase(t), clk)
	id, key := fundedAccount(t, s, 500) // events 1-3: opened, key issued, purchase
	hash := domain.HashKey(key.APIKey)
	for i := range 300 {
		clk.Advance(time.Second)
		mustCharge(t, s, hash, fmt.Sprint("p", i), 1)
	}
	var version, position int64
	var at time.Time
	if err := s.pool.QueryRow(ctx, `SELECT m.version, m.position, m.recorded_at FROM stream_marks m
		JOIN streams st USING (stream_no) WHERE st.stream_id = $1`, domain.AccountStream(id)).Scan(&version, &position, &at); err != nil {
		t.Fatalf("the stream's mark: %v", err)
	}
	var eventPosition int64
	var eventAt time.Time
	if err := s.pool.QueryRow(ctx, `SELECT e.position, e.recorded_at FROM events e JOIN streams st USING (stream_no)
		WHERE st.stream_id = $1 AND e.version = 256`, domain.AccountStream(id)).Scan(&eventPosition, &eventAt); err != nil {
		t.Fatal(err)
	}
	if version != 256 || position != eventPosition || !at.Equal(eventAt) {
		t.Fatalf("mark %d at %d (%v); want version 256 at %d (%v)", version, position, at, eventPosition, eventAt)
	}
	// Event 256 is the 253rd charge: the balance just after it is 1000 - 253.
	if b, err := s.views.BalanceAt(ctx, id, eventAt); err != nil || b != 747 {
		t.Fatalf("balance at the marked event: %d %v; want 747", b, err)
	}
	auditClean(t, s.pool)
}
