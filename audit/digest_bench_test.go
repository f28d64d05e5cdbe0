package audit_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// BenchmarkDigest1M takes a digest of a store of 1,000,000 events (20,000 streams of 50, about
// 150-byte payloads), verifies the store against it, and audits it; make bench reports the
// three times (docs/benchmarks.md). BENCH_DIGEST_EVENTS chooses another size.
func BenchmarkDigest1M(b *testing.B) {
	total := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("BENCH_DIGEST_EVENTS")); err == nil && v > 0 {
		total = v
	}
	pool := pgtest.NewPool(b)
	fillStore(b, pool, total, 50)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	var d audit.Digest
	b.Run("take", func(b *testing.B) {
		for b.Loop() {
			var err error
			if d, err = audit.TakeDigest(ctx, pool, key, noon); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(d.Events), "events")
	})
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			rep, err := audit.VerifyDigest(ctx, pool, d, 0)
			if err != nil || len(rep.Differences) != 0 || rep.Events != int64(total) {
				b.Fatalf("%+v, %v", rep, err)
			}
		}
		b.ReportMetric(float64(total)/(b.Elapsed().Seconds()/float64(b.N)), "events/s")
	})
	b.Run("audit", func(b *testing.B) {
		for b.Loop() {
			rep, err := audit.Run(ctx, pool, audit.Options{})
			if err != nil || len(rep.Differences) != 0 || rep.Events != int64(total) {
				b.Fatalf("%+v, %v", rep, err)
			}
		}
		b.ReportMetric(float64(total)/(b.Elapsed().Seconds()/float64(b.N)), "events/s")
	})
}

// fillStore appends total events to streams of perStream events through the event store.
func fillStore(b *testing.B, pool *pgxpool.Pool, total, perStream int) {
	b.Helper()
	pad := strings.Repeat("x", 100)
	const chunk = 10_000
	for start := 0; start < total; start += chunk {
		n := min(chunk, total-start)
		streams := make([]string, 0, n/perStream+1)
		for s := start / perStream; s <= (start+n-1)/perStream; s++ {
			streams = append(streams, fmt.Sprintf("note-%07d", s))
		}
		err := eventstore.New(pool).WithTx(ctx, func(tx pgx.Tx) error {
			heads, err := eventstore.OpenHeads(ctx, tx, true, streams...)
			if err != nil {
				return err
			}
			var batch eventstore.Batch
			for i := start; i < start+n; i++ {
				h := heads[fmt.Sprintf("note-%07d", i/perStream)]
				if _, err := batch.Add(h, noon, eventstore.NewEvent{Type: "Note", Payload: map[string]any{"n": i, "pad": pad}}); err != nil {
					return err
				}
			}
			return eventstore.Write(ctx, tx, &batch)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
