package commands_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// The charge benchmarks share one shape, so their ns/op compare directly: 16 goroutines per
// CPU charging distinct places (so every charge pays), round-robin over benchAccounts accounts.
// PostgreSQL's own insert ceilings are measured by bench/pgceiling.
const (
	benchParallelism = 16
	benchAccounts    = 50
)

func benchCharges(b *testing.B, opts commands.MeterOptions) {
	var batches, batched atomic.Int64
	opts.BeforeBatch = func(n int) {
		batches.Add(1)
		batched.Add(int64(n))
	}
	s := newStack(b, pgtest.NewDatabase(b), &clock{now: noon}, opts)
	callers := make([]commands.Caller, benchAccounts)
	for i := range callers {
		_, key := fundedAccount(b, s, 2_500_000)
		c, err := s.meter.Authenticate(ctx, domain.HashKey(key.APIKey))
		if err != nil {
			b.Fatal(err)
		}
		callers[i] = c
	}
	batches.Store(0)
	batched.Store(0)
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			res, err := s.meter.Charge(ctx, commands.ChargeRequest{Caller: callers[n%benchAccounts],
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

// BenchmarkChargeSingleTx runs each charge in a transaction of its own (batches of one).
func BenchmarkChargeSingleTx(b *testing.B) {
	benchCharges(b, commands.MeterOptions{MaxBatch: 1, Workers: 16})
}

// BenchmarkChargeGroupCommit runs the meter as `kyapi serve` does.
func BenchmarkChargeGroupCommit(b *testing.B) { benchCharges(b, commands.MeterOptions{}) }
