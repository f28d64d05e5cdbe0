package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// dayResult is what runDay did.
type dayResult struct {
	Accounts      int     `json:"accounts"`
	ClaimsBefore  int     `json:"claims_before"` // the day's claims of the accounts before the run
	ClaimsAfter   int     `json:"claims_after"`  // and after it
	Charges       int64   `json:"charges"`
	Paid          int64   `json:"paid"`
	Deduplicated  int64   `json:"deduplicated"`
	Seconds       float64 `json:"seconds"`
	ChargesPerSec float64 `json:"charges_per_sec"`
}

// runDay fills the day of the paying accounts (the API keys of -keys): each is charged a place
// detail for distinct places of -places (its own order of them), -charges in all, or with
// -claims as many as bring the accounts' claims of the day to about that many (fewer if the
// accounts would run out of places), through
// commands.Meter as `kyapi serve` meters them (group commit, the accounts' events, claims and
// claim chunks). What it leaves is what a busy day leaves: every account with thousands of
// dedup claims of the day, which a serving process must hold to decide from memory.
func runDay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("day", flag.ContinueOnError)
	keysFile := fs.String("keys", "", "file of API keys, one a line (the paying accounts)")
	placesFile := fs.String("places", "", "places.tsv of bench/run.sh (place_id first on each line)")
	charges := fs.Int64("charges", 2_500_000, "charges in all, spread evenly over the accounts (at most one a place and account)")
	claims := fs.Int("claims", 0, "if set, instead of -charges: charge until the accounts hold about this many claims of the day, those of earlier traffic included")
	inFlight := fs.Int("in-flight", 800, "charges waiting at once")
	out := fs.String("out", "", "write the result as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	keys, err := lines(*keysFile, false)
	if err != nil {
		return err
	}
	places, err := lines(*placesFile, true)
	if err != nil {
		return err
	}
	if len(keys) == 0 || len(places) == 0 {
		return errors.New("day: -keys and -places must name non-empty files")
	}
	pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The meter holds every claim of the day, those made before it too, whatever the bound of
	// `kyapi serve`: this run is only the day's traffic, not what it measures.
	meter := commands.NewMeter(eventstore.New(pool), time.Now, commands.MeterOptions{MaxClaims: 1 << 30})
	defer meter.Close()
	callers := make([]commands.Caller, len(keys))
	for i, k := range keys {
		key, err := domain.ParseAuthorization("Bearer " + k)
		if err != nil {
			return fmt.Errorf("day: key on line %d: %w", i+1, err)
		}
		if callers[i], err = meter.Authenticate(ctx, domain.HashKey(key)); err != nil {
			return fmt.Errorf("day: key on line %d: %w", i+1, err)
		}
	}
	// The day's claims so far: charging each account once (the catalog's first place) makes the
	// meter read and hold all its claims of the day.
	var next, paid, dedup atomic.Int64
	count := func(res commands.ChargeResult) {
		if len(res.Paid) > 0 {
			paid.Add(1)
		} else {
			dedup.Add(1)
		}
	}
	t0 := time.Now()
	for a := range callers {
		res, err := meter.Charge(ctx, commands.ChargeRequest{Caller: callers[a], Operation: domain.OpPlaceDetail,
			Resources: []string{domain.PlaceResource(places[0])}})
		if err != nil {
			return fmt.Errorf("day: charging account %d: %w", a, err)
		}
		count(res)
	}
	before := meter.ClaimsHeld()
	if *claims > 0 {
		*charges = max(int64(*claims-before), 0)
	}
	// Each account pays for a place at most once: a smaller catalog (BENCH_PLACES) caps the day.
	perAccount := min((*charges+int64(len(keys))-1)/int64(len(keys)), int64(len(places)))
	// Account a charges places[(start[a] + step[a]·k) mod n] for k = 0, 1, …: distinct places,
	// in an order of its own, as step[a] and n share no factor.
	n := int64(len(places))
	rng := rand.New(rand.NewPCG(uint64(n), uint64(len(keys))))
	start, step := make([]int64, len(keys)), make([]int64, len(keys))
	for a := range keys {
		start[a], step[a] = rng.Int64N(n), 1+rng.Int64N(n)
		for gcd(step[a], n) != 1 {
			step[a] = 1 + rng.Int64N(n)
		}
	}

	total := perAccount * int64(len(keys))
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range *inFlight {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= total || ctx.Err() != nil || firstErr.Load() != nil {
					return
				}
				a, k := i%int64(len(keys)), i/int64(len(keys))
				place := places[(start[a]+step[a]*k)%n]
				res, err := meter.Charge(ctx, commands.ChargeRequest{Caller: callers[a], Operation: domain.OpPlaceDetail,
					Resources: []string{domain.PlaceResource(place)}})
				if err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("day: charging account %d: %w", a, err))
					return
				}
				count(res)
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	r := dayResult{Accounts: len(keys), ClaimsBefore: before, ClaimsAfter: meter.ClaimsHeld(), Charges: paid.Load() + dedup.Load(), Paid: paid.Load(), Deduplicated: dedup.Load(), Seconds: secs}
	r.ChargesPerSec = float64(r.Charges) / secs
	fmt.Printf("day: %d charges (%d paid, %d already paid today) over %d accounts in %.1f s: %.0f charges/s; claims of the day %d before, %d after\n",
		r.Charges, r.Paid, r.Deduplicated, r.Accounts, secs, r.ChargesPerSec, r.ClaimsBefore, r.ClaimsAfter)
	if *out != "" {
		return writeJSON(*out, r)
	}
	return nil
}

// lines reads a file's non-empty lines; firstField keeps only what comes before a tab.
func lines(name string, firstField bool) ([]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if firstField {
			l, _, _ = strings.Cut(l, "\t")
		}
		if l != "" {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
