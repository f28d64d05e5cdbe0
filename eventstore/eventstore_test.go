package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

var at = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func TestAppendWithTheExpectedVersionAndReadTheStreamBack(t *testing.T) {
	ctx := context.Background()
	store := eventstore.New(pgtest.NewPool(t))
	err := store.WithTx(ctx, func(tx pgx.Tx) error {
		v, err := store.Append(ctx, tx, "s-1", 0, at,
			eventstore.NewEvent{Type: "A", Payload: map[string]int{"n": 1}, Metadata: eventstore.Metadata{RequestID: "r1", Actor: "test"}},
			eventstore.NewEvent{Type: "B", Payload: map[string]int{"n": 2}})
		if v != 2 {
			t.Errorf("new version = %d, want 2", v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	events, err := eventstore.ReadStream(ctx, store.Pool, "s-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].Type != "A" || events[1].Version != 2 || events[0].Metadata.RequestID != "r1" || events[0].Metadata.Actor != "test" {
		t.Fatalf("read back %+v", events)
	}
	if !events[0].RecordedAt.Equal(at) {
		t.Errorf("recorded_at = %v, want %v", events[0].RecordedAt, at)
	}
}

func TestAppendAtAStaleVersionIsAConflictAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	store := eventstore.New(pgtest.NewPool(t))
	appendAt := func(expected int64) error {
		return store.WithTx(ctx, func(tx pgx.Tx) error {
			_, err := store.Append(ctx, tx, "s", expected, at, eventstore.NewEvent{Type: "X", Payload: struct{}{}})
			return err
		})
	}
	if err := appendAt(0); err != nil {
		t.Fatal(err)
	}
	for _, expected := range []int64{0, 2, 5} {
		if err := appendAt(expected); !errors.Is(err, eventstore.ErrVersionConflict) {
			t.Errorf("append at expected %d: err = %v, want ErrVersionConflict", expected, err)
		}
	}
	events, _ := eventstore.ReadStream(ctx, store.Pool, "s", 0)
	if len(events) != 1 {
		t.Errorf("stream has %d events, want 1", len(events))
	}
}

// Many writers append concurrently, some holding their transaction open after taking a
// position, while one reader follows all streams. A reader that trusted positions alone
// would pass events whose transaction commits late.
func TestReadAllNeverSkipsAnEventUnderConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	store := eventstore.New(pgtest.NewPool(t))
	const writers, perWriter = 12, 60

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			stream := fmt.Sprintf("w-%d", w)
			for v := int64(0); v < perWriter; v++ {
				err := store.WithTx(ctx, func(tx pgx.Tx) error {
					if _, err := store.Append(ctx, tx, stream, v, at, eventstore.NewEvent{Type: "E", Payload: map[string]int64{"v": v + 1}}); err != nil {
						return err
					}
					if (int(v)+w)%7 == 0 {
						time.Sleep(3 * time.Millisecond) // commit late, after others with higher positions
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[string]int64{}
	total := 0
	var cursor eventstore.Position
	finished := false
	lastProgress := time.Now()
	for {
		batch, err := eventstore.ReadAll(ctx, store.Pool, cursor, 37)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range batch {
			if e.Version != seen[e.StreamID]+1 {
				t.Fatalf("stream %s: got version %d after %d (event at %v, cursor %v)", e.StreamID, e.Version, seen[e.StreamID], e.At(), cursor)
			}
			seen[e.StreamID] = e.Version
			total++
			cursor = e.At()
		}
		if len(batch) > 0 {
			lastProgress = time.Now()
			continue
		}
		select {
		case <-done:
			finished = true
		default:
		}
		// Other transactions on the cluster can hold back the snapshot xmin for a while;
		// the reader waits for the stragglers rather than stopping at the first empty read.
		if finished && total == writers*perWriter {
			break
		}
		if finished && time.Since(lastProgress) > time.Minute {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if total != writers*perWriter {
		t.Fatalf("reader saw %d events, want %d", total, writers*perWriter)
	}
}

func TestNextBatchAndReadRangeCoverTheSameEvents(t *testing.T) {
	ctx := context.Background()
	store := eventstore.New(pgtest.NewPool(t))
	for i := int64(0); i < 10; i++ {
		_ = store.WithTx(ctx, func(tx pgx.Tx) error {
			_, err := store.Append(ctx, tx, "s", i, at, eventstore.NewEvent{Type: "E", Payload: struct{}{}})
			return err
		})
	}
	// Transactions elsewhere on the cluster can hold back the snapshot xmin for a moment.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, n, _ := eventstore.NextBatch(ctx, store.Pool, eventstore.Position{}, 100); n == 10 {
			break
		}
	}
	end, n, err := eventstore.NextBatch(ctx, store.Pool, eventstore.Position{}, 4)
	if err != nil || n != 4 {
		t.Fatalf("NextBatch = %v, %d, %v", end, n, err)
	}
	got, err := eventstore.ReadRange(ctx, store.Pool, eventstore.Position{}, end)
	if err != nil || len(got) != 4 || got[3].At() != end {
		t.Fatalf("ReadRange = %d events, err %v", len(got), err)
	}
	head, _ := eventstore.Head(ctx, store.Pool)
	rest, _ := eventstore.ReadRange(ctx, store.Pool, end, head)
	if len(rest) != 6 {
		t.Fatalf("rest = %d, want 6", len(rest))
	}
	_, n, _ = eventstore.NextBatch(ctx, store.Pool, head, 4)
	if n != 0 {
		t.Fatalf("NextBatch past head found %d", n)
	}
}

// Transaction ids are read as text; ordering must stay numeric where the digit count
// changes ("100" sorts before "99" as text).
func TestGlobalOrderIsNumericAcrossAPowerOfTenInTransactionIds(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for i, tx := range []string{"98", "99", "100", "101"} {
		if _, err := pool.Exec(ctx, `INSERT INTO events (transaction_id, stream_id, version, type, payload, recorded_at)
			VALUES ($1::text::xid8, 's', $2, 'E', '{}', now())`, tx, i+1); err != nil {
			t.Fatal(err)
		}
	}
	var versions []int64
	var cursor eventstore.Position
	for {
		page, err := eventstore.ReadAll(ctx, pool, cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			versions = append(versions, e.Version)
			cursor = e.At()
		}
	}
	if fmt.Sprint(versions) != "[1 2 3 4]" {
		t.Fatalf("read versions %v in global order, want [1 2 3 4]", versions)
	}
	head, err := eventstore.Head(ctx, pool)
	if err != nil || head.TxID != 101 {
		t.Fatalf("head = %v, %v; want transaction 101", head, err)
	}
	end, n, err := eventstore.NextBatch(ctx, pool, eventstore.Position{}, 3)
	if err != nil || n != 3 || end.TxID != 100 {
		t.Fatalf("NextBatch = %v, %d, %v; want 3 events ending at transaction 100", end, n, err)
	}
}
