package commands_test

import (
	"sync"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// laneTest is a meter with two lanes and OverlapAt 4 whose batches can be held at their start:
// BeforeBatch reports each batch's size on started, and waits for release when hold says so.
type laneTest struct {
	stack
	keys    [2][]domain.KeyHash // keys of two accounts in each lane
	started chan int
	release chan struct{}
	mu      sync.Mutex
	hold    func(size int) bool
	wg      sync.WaitGroup
	done    sync.Once
}

// releaseAll lets every batch held, and every batch to come, go on.
func (lt *laneTest) releaseAll() { lt.done.Do(func() { close(lt.release) }) }

func newLaneTest(t *testing.T) *laneTest {
	lt := &laneTest{started: make(chan int, 64), release: make(chan struct{}), hold: func(int) bool { return false }}
	lt.stack = newStack(t, pgtest.NewDatabase(t), &clock{now: noon}, commands.MeterOptions{Workers: 2, OverlapAt: 4,
		BeforeBatch: func(n int) {
			lt.mu.Lock()
			held := lt.hold(n)
			lt.mu.Unlock()
			lt.started <- n
			if held {
				<-lt.release
			}
		}})
	for len(lt.keys[0]) < 2 || len(lt.keys[1]) < 2 {
		id, key := fundedAccount(t, lt.stack, 100_000)
		if l := lt.meter.LaneOf(id); len(lt.keys[l]) < 2 {
			lt.keys[l] = append(lt.keys[l], domain.HashKey(key.APIKey))
		}
	}
	t.Cleanup(func() { lt.releaseAll(); lt.wg.Wait() })
	return lt
}

// holdNext holds the next batch whose size is n, and no other.
func (lt *laneTest) holdNext(n int) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	once := false
	lt.hold = func(size int) bool {
		if size == n && !once {
			once = true
			return true
		}
		return false
	}
}

// holdFirst charges with key and holds that charge's batch, alone, in flight.
func (lt *laneTest) holdFirst(t *testing.T, key domain.KeyHash) {
	t.Helper()
	lt.holdNext(1)
	lt.send(t, key, "pl_0000001")
	if n := lt.nextBatch(10 * time.Second); n != 1 {
		t.Fatalf("first batch: %d charges, want 1", n)
	}
}

// send charges a place detail with key in the background; each charge names a place of its own.
func (lt *laneTest) send(t *testing.T, key domain.KeyHash, place string) {
	lt.wg.Add(1)
	go func() {
		defer lt.wg.Done()
		if res, err := lt.charge(key, domain.OpPlaceDetail, "place:"+place); err != nil || len(res.Paid) != 1 {
			t.Errorf("charge of %s: %+v, %v", place, res, err)
		}
	}()
}

// nextBatch is the size of the next batch to start, or 0 if none starts within a while.
func (lt *laneTest) nextBatch(within time.Duration) int {
	select {
	case n := <-lt.started:
		return n
	case <-time.After(within):
		return 0
	}
}

func (lt *laneTest) waitPending(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); lt.meter.Pending() != n; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d charges pending, want %d", lt.meter.Pending(), n)
		}
	}
}

// startsOnlyAfterRelease checks that once pending charges wait, no batch starts beside the one
// held in flight, and that when it is released the next batch holds want charges.
func (lt *laneTest) startsOnlyAfterRelease(t *testing.T, pending, want int, who string) {
	t.Helper()
	lt.waitPending(t, pending)
	if n := lt.nextBatch(200 * time.Millisecond); n != 0 {
		t.Fatalf("%s started a batch of %d beside the one in flight: it must wait", who, n)
	}
	lt.releaseAll()
	if n := lt.nextBatch(10 * time.Second); n != want {
		t.Fatalf("%s: the batch after the one in flight holds %d charges, want %d", who, n, want)
	}
}

// Under light load a batch starts only when none is in flight, and takes the charges of every
// lane: one transaction instead of two, each sharing its fixed cost with fewer charges.
func TestBelowOverlapAtTheNextBatchWaitsAndTakesEveryLane(t *testing.T) {
	lt := newLaneTest(t)
	lt.holdFirst(t, lt.keys[0][0])
	lt.send(t, lt.keys[0][1], "pl_0000002")
	lt.send(t, lt.keys[1][0], "pl_0000003")
	lt.send(t, lt.keys[1][1], "pl_0000004")
	lt.startsOnlyAfterRelease(t, 3, 3, "below OverlapAt, both lanes' charges")
}

// A lane holding OverlapAt charges starts its batch beside the one in flight: under heavy load
// the lanes overlap.
func TestALaneHoldingOverlapAtChargesStartsBesideTheBatchInFlight(t *testing.T) {
	lt := newLaneTest(t)
	lt.holdFirst(t, lt.keys[0][0])
	// The lane's worker may take the first charges before the rest arrive: wait for no
	// batch to start until all four are there, which needs the lane to hold them.
	lt.mu.Lock()
	lt.hold = func(int) bool { return false }
	lt.mu.Unlock()
	for i, p := range []string{"pl_0000002", "pl_0000003", "pl_0000004", "pl_0000005"} {
		lt.send(t, lt.keys[1][i%2], p)
	}
	got := 0
	for got < 4 {
		n := lt.nextBatch(10 * time.Second)
		if n == 0 {
			t.Fatalf("%d of the other lane's 4 charges started beside the batch in flight", got)
		}
		got += n
	}
	lt.releaseAll()
}

// While the batches in flight hold OverlapAt charges, a lane starts its batch beside them
// however few charges it holds.
func TestWhileOverlapAtChargesAreInFlightASmallBatchStartsBeside(t *testing.T) {
	lt := newLaneTest(t)
	lt.holdFirst(t, lt.keys[0][0])
	// Four more in the same lane queue behind it (its worker is busy) and start as a batch of
	// their own, held too.
	for i, p := range []string{"pl_0000002", "pl_0000003", "pl_0000004", "pl_0000005"} {
		lt.send(t, lt.keys[0][i%2], p)
	}
	lt.waitPending(t, 4)
	lt.holdNext(4)
	lt.release <- struct{}{}
	if n := lt.nextBatch(10 * time.Second); n != 4 {
		t.Fatalf("second batch: %d charges, want 4", n)
	}
	lt.send(t, lt.keys[1][0], "pl_0000006")
	if n := lt.nextBatch(10 * time.Second); n != 1 {
		t.Fatalf("the other lane's one charge did not start beside the 4 in flight (got %d)", n)
	}
	lt.releaseAll()
}

// A sweep started by one lane's worker may hold another lane's charges: that lane starts
// nothing beside it, however many charges it then holds, so that no account has two batches
// in flight.
func TestALaneWhoseChargesASweepHoldsWaitsForIt(t *testing.T) {
	lt := newLaneTest(t)
	lt.holdFirst(t, lt.keys[1][0])
	lt.send(t, lt.keys[0][0], "pl_0000002")
	lt.waitPending(t, 1)
	lt.send(t, lt.keys[1][1], "pl_0000003")
	lt.waitPending(t, 2)
	// Lane 1's worker ends its batch holding the lock and sweeps both lanes' charges.
	lt.holdNext(2)
	lt.release <- struct{}{}
	if n := lt.nextBatch(10 * time.Second); n != 2 {
		t.Fatalf("second batch: %d charges, want the sweep of both lanes' 2", n)
	}
	for i, p := range []string{"pl_0000004", "pl_0000005", "pl_0000006", "pl_0000007"} {
		lt.send(t, lt.keys[0][i%2], p)
	}
	lt.startsOnlyAfterRelease(t, 4, 4, "lane 0, whose charge the sweep holds,")
}
