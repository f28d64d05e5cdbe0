// Package pgceiling measures PostgreSQL's own ceiling for the appends metering makes, on
// the database the load test uses: single-row and 50-row INSERT transactions into a
// scratch table shaped like events, and, for comparison, commands.Charger.Charge itself
// (one metered request, one transaction) without HTTP in front. Each benchmark reports
// rows/s with the same concurrency and pool size as `kyapi serve` (16 connections).
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

// payload is about the size of a RequestCharged event's payload.
const payload = `{"account_id":"acct_0123456789abcdef","key_id":"key_0123456789abcdef","request_id":"req_0123456789abcdef0123","operation":"places.detail","day":"2026-01-01","paid":["place:pl_0001234"],"deduplicated":[],"omitted_unpaid":0,"credits_delta":-1,"balance_after":4999999}`

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
	b.SetParallelism(max(1, connections/runtime.GOMAXPROCS(0)))
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
	sql := `INSERT INTO ` + table + ` (stream_id, version, type, payload, metadata, recorded_at)
		VALUES ($1, 1, 'RequestCharged', $2, '{"actor":"key:bench"}', now())`
	parallel(b, 1, func(ctx context.Context) error {
		_, err := pool.Exec(ctx, sql, "bench-"+strconv.FormatInt(streamSeq.Add(1), 10), payload)
		return err
	})
}

func BenchmarkPostgresInsertBatched50(b *testing.B) {
	const rows = 50
	pool := openPool(b)
	table := scratchTable(b, pool)
	sql := `INSERT INTO ` + table + ` (stream_id, version, type, payload, metadata, recorded_at)
		SELECT s, 1, 'RequestCharged', $2::jsonb, '{"actor":"key:bench"}', now() FROM unnest($1::text[]) s`
	parallel(b, rows, func(ctx context.Context) error {
		ids := make([]string, rows)
		for i := range ids {
			ids[i] = "bench-" + strconv.FormatInt(streamSeq.Add(1), 10)
		}
		_, err := pool.Exec(ctx, sql, ids, payload)
		return err
	})
}

// BenchmarkChargeParallel meters place-detail requests through commands.Charger with group
// commit, as kyapi serve wires it, from 16 goroutines over 64 accounts: the append path of a metered
// request without HTTP, the index or the read models.
func BenchmarkChargeParallel(b *testing.B) {
	pool := openPool(b)
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, pool); err != nil {
		b.Fatal(err)
	}
	store := eventstore.New(pool)
	accounts := commands.Accounts{Store: store, Clock: time.Now}
	meta := eventstore.Metadata{Actor: "bench:pgceiling"}
	run := time.Now().UnixNano()
	var keys []domain.KeyHash
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
		keys = append(keys, domain.HashKey(key))
	}
	// Wired as kyapi serve wires it: concurrent charges share transactions (group commit).
	group := commands.NewGroupCommitter(store, time.Now, commands.GroupCommitOptions{})
	defer group.Close()
	charger := commands.Charger{Store: store, Clock: time.Now, Group: group}
	var seq atomic.Int64
	parallel(b, 1, func(ctx context.Context) error {
		n := seq.Add(1)
		_, err := charger.Charge(ctx, commands.ChargeRequest{
			KeyHash:   keys[n%int64(len(keys))],
			RequestID: "req_pgceiling_" + strconv.FormatInt(n, 10),
			Operation: domain.OpPlaceDetail,
			Resources: []string{domain.PlaceResource(fmt.Sprintf("pl_bench_%d", n))},
		})
		return err
	})
}
