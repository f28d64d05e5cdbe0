// Package pgceiling measures PostgreSQL's own ceiling for the appends metering makes, on
// the database the load test uses: single-row and 50-row INSERT transactions into a
// scratch table shaped like events (same columns, defaults and indexes; rows as lean as a
// charge event), and, for comparison, commands.Meter.Charge itself (group commit, as `kyapi
// serve` wires it) without HTTP in front. Each benchmark reports rows/s with the same
// concurrency and pool size as `kyapi serve` (16 connections).
//
//	BENCH_DATABASE_URL=postgres://.../kyapi_bench go test -run '^$' -bench . -benchtime 5s ./bench/pgceiling/
package pgceiling

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/migrations"
)

// connections matches cmd/kyapi openDB's pool (at least 16) on this 2-core machine.
const connections = 16

// payload is a RequestCharged event's payload (domain.RequestCharged) for a place detail.
const payload = `{"k":1,"op":"places.detail","paid":["place:pl_0001234"],"d":-1,"b":4999999}`

// hash stands for an event's 32-byte chained hash.
var hash = make([]byte, 32)

func openPool(b *testing.B) *pgxpool.Pool {
	url := os.Getenv("BENCH_DATABASE_URL")
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	if url == "" {
		b.Skip("BENCH_DATABASE_URL (or DATABASE_URL) is not set")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = connections
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// scratchTable creates a table like events (identity, defaults, unique and order indexes)
// and drops it when the benchmark ends.
func scratchTable(b *testing.B, pool *pgxpool.Pool) string {
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, pool); err != nil {
		b.Fatal(err)
	}
	name := "bench_events_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := pool.Exec(ctx, `CREATE TABLE `+name+` (LIKE events INCLUDING ALL)`); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE `+name) })
	return name
}

// parallel runs body from `connections` goroutines and reports rows/s.
func parallel(b *testing.B, rowsPerOp int, body func(ctx context.Context) error) {
	parallelFrom(b, connections, rowsPerOp, body)
}

// parallelFrom runs body from about `callers` goroutines and reports rows/s.
func parallelFrom(b *testing.B, callers, rowsPerOp int, body func(ctx context.Context) error) {
	b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := body(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N*rowsPerOp)/time.Since(start).Seconds(), "rows/s")
}

var streamSeq atomic.Int64

func BenchmarkPostgresInsertSingleRow(b *testing.B) {
	pool := openPool(b)
	table := scratchTable(b, pool)
	sql := `INSERT INTO ` + table + ` (stream_no, version, type, hash, payload, recorded_at)
		VALUES ($1, 1, 'RequestCharged', $2, $3, now())`
	parallel(b, 1, func(ctx context.Context) error {
		_, err := pool.Exec(ctx, sql, int32(streamSeq.Add(1)), hash, payload)
		return err
	})
}

func BenchmarkPostgresInsertBatched50(b *testing.B) {
	const rows = 50
	pool := openPool(b)
	table := scratchTable(b, pool)
	sql := `INSERT INTO ` + table + ` (stream_no, version, type, hash, payload, recorded_at)
		SELECT s, 1, 'RequestCharged', $2, $3::json, now() FROM unnest($1::int[]) s`
	parallel(b, rows, func(ctx context.Context) error {
		ids := make([]int32, rows)
		for i := range ids {
			ids[i] = int32(streamSeq.Add(1))
		}
		_, err := pool.Exec(ctx, sql, ids, hash, payload)
		return err
	})
}

// BenchmarkChargeParallel meters place-detail requests through commands.Meter, as kyapi serve
// wires it, from 16 goroutines over 64 accounts: the append path of a metered request without
// HTTP, the index or the read models.
func BenchmarkChargeParallel(b *testing.B) { chargeFrom(b, connections) }

// BenchmarkChargeInFlight800 is BenchmarkChargeParallel with 800 charges in flight: as many
// appends as BenchmarkPostgresInsertBatched50 has rows in flight (16 connections × 50), so
// the two compare the same load, and the meter's batches can fill as the ceiling's do.
func BenchmarkChargeInFlight800(b *testing.B) { chargeFrom(b, connections*50) }

func chargeFrom(b *testing.B, inFlight int) {
	pool := openPool(b)
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, pool); err != nil {
		b.Fatal(err)
	}
	store := eventstore.New(pool)
	accounts := commands.Accounts{Store: store, Clock: time.Now}
	meta := eventstore.Metadata{Actor: "bench:pgceiling"}
	run := time.Now().UnixNano()
	meter := commands.NewMeter(store, time.Now, commands.MeterOptions{})
	defer meter.Close()
	var callers []commands.Caller
	for i := range 64 {
		tag := fmt.Sprintf("%d-%d", run, i)
		id, err := accounts.OpenAccount(ctx, "pgceiling "+tag, "pgceiling-"+tag+"@bench.example", meta)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := accounts.Purchase(ctx, id, 2_500_000, "pgceiling-"+tag, meta); err != nil {
			b.Fatal(err)
		}
		k, err := accounts.IssueKey(ctx, id, meta)
		if err != nil {
			b.Fatal(err)
		}
		key, err := domain.ParseAuthorization("Bearer " + k.APIKey)
		if err != nil {
			b.Fatal(err)
		}
		c, err := meter.Authenticate(ctx, domain.HashKey(key))
		if err != nil {
			b.Fatal(err)
		}
		callers = append(callers, c)
	}
	var seq atomic.Int64
	parallelFrom(b, inFlight, 1, func(ctx context.Context) error {
		n := seq.Add(1)
		_, err := meter.Charge(ctx, commands.ChargeRequest{
			Caller:    callers[n%int64(len(callers))],
			Operation: domain.OpPlaceDetail,
			Resources: []string{domain.PlaceResource(fmt.Sprintf("pl_bench_%d", n))},
		})
		return err
	})
}
