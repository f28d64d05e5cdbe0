package commands

import (
	"math/rand/v2"
	"testing"
)

// TestAClaimSetHoldsWhatAMapHolds adds and looks up random hashes, the hash 0, negative ones
// and hashes that share their low bits, at every load of tables of many sizes (so that runs
// of claims probe past each other and wrap around the end of the table), and compares every
// answer with a map's.
func TestAClaimSetHoldsWhatAMapHolds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		var s claimSet
		if round%2 == 1 {
			s = newClaimSet(rng.IntN(300))
		}
		want := map[int64]bool{}
		n := rng.IntN(5000)
		for i := range n {
			var h int64
			switch rng.IntN(6) {
			case 0:
				h = 0
			case 1:
				h = int64(rng.Uint64()<<12 | 0xffd) // the same low 12 bits
			case 2:
				h = -rng.Int64N(100)
			case 3:
				if len(want) > 0 && i%3 == 0 {
					for k := range want {
						h = k
						break
					}
					break
				}
				fallthrough
			default:
				h = int64(rng.Uint64())
			}
			if got, fresh := s.add(h), !want[h]; got != fresh {
				t.Fatalf("round %d: add(%d) answered %v, want %v", round, h, got, fresh)
			}
			want[h] = true
			if s.len() != len(want) {
				t.Fatalf("round %d: len %d after %d distinct hashes", round, s.len(), len(want))
			}
		}
		for h := range want {
			if !s.has(h) {
				t.Fatalf("round %d: the set lost %d", round, h)
			}
		}
		for range 2000 {
			h := int64(rng.Uint64())
			if rng.IntN(2) == 0 {
				h = int64(rng.Uint64()<<12 | 0xffd)
			}
			if s.has(h) != want[h] {
				t.Fatalf("round %d: has(%d) = %v, want %v", round, h, s.has(h), want[h])
			}
		}
		if len(s.slots) > 0 && s.n*4 > len(s.slots)*3 {
			t.Fatalf("round %d: %d claims in %d slots, more than three quarters full", round, s.n, len(s.slots))
		}
	}
}

// TestAnEmptyClaimSetHoldsNothing: the zero set, before anything was added.
func TestAnEmptyClaimSetHoldsNothing(t *testing.T) {
	var s claimSet
	for _, h := range []int64{0, 1, -1, 1 << 62} {
		if s.has(h) {
			t.Fatalf("an empty set has %d", h)
		}
	}
	if s.len() != 0 {
		t.Fatalf("len %d", s.len())
	}
}

// TestAClaimSetTakesAtMost21BytesAClaim: the table's bytes per claim at
// every size up to 100,000 claims stay within what the growth rule promises (at most 8 / 0.375
// bytes, just after a doubling), where a map[int64]struct{} takes about 26.
func TestAClaimSetTakesAtMost21BytesAClaim(t *testing.T) {
	var s claimSet
	rng := rand.New(rand.NewPCG(3, 4))
	for s.len() < 100_000 {
		s.add(int64(rng.Uint64() | 1))
		if n := s.len(); n >= 12 {
			if per := float64(8*len(s.slots)) / float64(n); per > 8/0.375+0.01 {
				t.Fatalf("%d claims take %d slots: %.1f bytes a claim", n, len(s.slots), per)
			}
		}
	}
}

// A client that chose its resources so that their hashes share their low bits (or their high
// bits) does not pile its claims into one run of slots: the longest walk from a claim's first
// slot stays short. Indexed by the hash's own low bits, 4,096 such claims would form one run
// of 4,096.
func TestClaimsWhoseHashesShareBitsDoNotPileUp(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for name, craft := range map[string]func() int64{
		"low bits":  func() int64 { return int64(rng.Uint64()<<20 | 0x5a5a5) },
		"high bits": func() int64 { return int64(rng.Uint64()>>20 | 0x7ab<<52) },
	} {
		var s claimSet
		for s.len() < 4096 {
			s.add(craft())
		}
		mask := uint64(len(s.slots) - 1)
		longest := uint64(0)
		for i, h := range s.slots {
			if h != 0 {
				longest = max(longest, (uint64(i)-s.home(h))&mask)
			}
		}
		if longest > 200 {
			t.Fatalf("%s: a claim lies %d slots past its first slot in a table of %d", name, longest, len(s.slots))
		}
	}
}
