package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// The four benchmarks share one shape, so their ns/op compare directly: 16 goroutines per
// CPU, a pool of benchConns connections, a fresh database. The two raw-INSERT ones are
// the floor and the ceiling for the charge path: one event row per transaction, and 50 per
// transaction sent in one round trip.
const (
	benchParallelism = 16
	benchConns       = 16
	benchAccounts    = 50
)

func benchPool(b *testing.B) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = benchConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// benchCharges charges distinct places, so that every charge pays, round-robin over
// benchAccounts accounts holding 5,000,000 credits each.
func benchCharges(b *testing.B, group bool) {
	store := eventstore.New(benchPool(b))
	clock := func() time.Time { return time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) }
	accounts := commands.Accounts{Store: store, Clock: clock}
	charger := commands.Charger{Store: store, Clock: clock}
	var batches, batched atomic.Int64
	if group {
		charger.Group = commands.NewGroupCommitter(store, clock, commands.GroupCommitOptions{BeforeBatch: func(n int) {
			batches.Add(1)
			batched.Add(int64(n))
		}})
		b.Cleanup(charger.Group.Close)
	}
	hashes := make([]domain.KeyHash, benchAccounts)
	for i := range hashes {
		id, err := accounts.OpenAccount(ctx, "Bench Co", "bench@test.example", eventstore.Metadata{})
		if err != nil {
			b.Fatal(err)
		}
		key, err := accounts.IssueKey(ctx, id, eventstore.Metadata{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := accounts.Purchase(ctx, id, 2_500_000, "pay-"+id, eventstore.Metadata{}); err != nil {
			b.Fatal(err)
		}
		hashes[i] = domain.HashKey(key.APIKey)
	}
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			res, err := charger.Charge(ctx, commands.ChargeRequest{KeyHash: hashes[n%benchAccounts], RequestID: fmt.Sprint("r", n),
				Operation: domain.OpPlaceDetail, Resources: []string{domain.PlaceResource(fmt.Sprint("p", n))}})
			if err != nil || res.Credits != 1 {
				b.Errorf("charge %d: %+v %v", n, res, err)
				return
			}
		}
	})
	if n := batches.Load(); n > 0 {
		b.ReportMetric(float64(batched.Load())/float64(n), "charges/batch")
	}
}

func BenchmarkChargeSingleTx(b *testing.B)    { benchCharges(b, false) }
func BenchmarkChargeGroupCommit(b *testing.B) { benchCharges(b, true) }

// scratchEvents makes a copy of the events table to insert into, and a typical charge
// event's payload and metadata.
func scratchEvents(b *testing.B) (*pgxpool.Pool, string, string) {
	pool := benchPool(b)
	if _, err := pool.Exec(ctx, `CREATE TABLE scratch_events (LIKE events INCLUDING ALL)`); err != nil {
		b.Fatal(err)
	}
	payload, _ := json.Marshal(domain.RequestCharged{AccountID: "acc_0123456789abcdef0123", KeyID: "key_0123456789abcdef0123",
		RequestID: "r1", Operation: domain.OpPlaceDetail, Day: "2026-11-23", Paid: []string{domain.PlaceResource("p1")},
		Ledger: domain.Ledger{CreditsDelta: -1, BalanceAfter: 4_999_999}})
	meta, _ := json.Marshal(eventstore.Metadata{RequestID: "r1", Actor: "key:key_0123456789abcdef0123"})
	return pool, string(payload), string(meta)
}

const insertScratch = `INSERT INTO scratch_events (stream_id, version, type, payload, metadata, recorded_at) VALUES ($1, 1, 'RequestCharged', $2, $3, now())`

func BenchmarkPostgresInsertSingleRow(b *testing.B) {
	pool, payload, meta := scratchEvents(b)
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := pool.Exec(ctx, insertScratch, fmt.Sprint("s-", next.Add(1)), payload, meta); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkPostgresInsertBatched50(b *testing.B) {
	pool, payload, meta := scratchEvents(b)
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		flush := func(batch *pgx.Batch) bool {
			if batch.Len() == 0 {
				return true
			}
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, batch).Close() })
			if err != nil {
				b.Error(err)
			}
			return err == nil
		}
		batch := &pgx.Batch{}
		for pb.Next() {
			batch.Queue(insertScratch, fmt.Sprint("s-", next.Add(1)), payload, meta)
			if batch.Len() == 50 {
				if !flush(batch) {
					return
				}
				batch = &pgx.Batch{}
			}
		}
		flush(batch)
	})
}
