package commands

import (
	"math/bits"
	"math/rand/v2"
)

// claimSet is a set of resource hashes (ResourceHash) kept in a flat table of int64s, open
// addressing with linear probing: about 11 to 21 bytes a claim (the table is at most three
// quarters full and doubles when it would be fuller), where a Go map takes about 26, and
// nothing in it for the garbage collector to scan. A meter holds millions of them (the
// claims of the day of every account it charges: MeterOptions.MaxClaims), so the bytes a
// claim takes decide how many fit before the meter must forget accounts and read their
// claims back from the store.
//
// A claim's slot is taken from the high bits of its hash times claimSeed, an odd number drawn
// when the process starts. Resource hashes are SHA-256 prefixes, uniform enough as they are,
// but a client chooses what it requests (a parameterized list's identity holds its
// parameters) and could search offline for resources whose hashes share their low bits,
// piling its claims into one run of slots that every lookup of its account then walks; not
// knowing the seed, it cannot. 0 marks an empty slot; the claim 0 itself is kept aside.
type claimSet struct {
	slots   []int64
	shift   uint8 // 64 − log2(len(slots)): home keeps the top bits
	n       int   // claims in slots
	hasZero bool
}

// claimSeed scatters the claims of every claimSet of this process (see claimSet).
var claimSeed = rand.Uint64() | 1

// home is h's first slot.
func (s *claimSet) home(h int64) uint64 { return (uint64(h) * claimSeed) >> s.shift }

// makeTable gives the set an empty table of size slots (a power of two).
func (s *claimSet) makeTable(size int) {
	s.slots = make([]int64, size)
	s.shift = uint8(64 - bits.TrailingZeros(uint(size)))
}

// newClaimSet returns a set sized for about n claims.
func newClaimSet(n int) claimSet {
	var s claimSet
	if n > 0 {
		s.makeTable(tableSize(n))
	}
	return s
}

// tableSize is the smallest power of two, at least 16, that holds n claims at most three
// quarters full.
func tableSize(n int) int {
	size := 16
	for size*3/4 < n {
		size *= 2
	}
	return size
}

// len is the number of claims in the set.
func (s *claimSet) len() int {
	if s.hasZero {
		return s.n + 1
	}
	return s.n
}

// slot is where h is (found) or, if it is not in the set, the empty slot where it goes: the
// first of its run from its home. h is not 0, and the table has an empty slot.
func (s *claimSet) slot(h int64) (i uint64, found bool) {
	mask := uint64(len(s.slots) - 1)
	for i = s.home(h); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return i, true
		case 0:
			return i, false
		}
	}
}

// has tells whether h is in the set.
func (s *claimSet) has(h int64) bool {
	if h == 0 {
		return s.hasZero
	}
	if len(s.slots) == 0 {
		return false
	}
	_, found := s.slot(h)
	return found
}

// add puts h in the set and tells whether it was not there yet.
func (s *claimSet) add(h int64) bool {
	if h == 0 {
		added := !s.hasZero
		s.hasZero = true
		return added
	}
	if (s.n+1)*4 > len(s.slots)*3 {
		s.grow()
	}
	i, found := s.slot(h)
	if found {
		return false
	}
	s.slots[i] = h
	s.n++
	return true
}

// grow doubles the table (or makes the first one) and places every claim again.
func (s *claimSet) grow() {
	old := s.slots
	s.makeTable(max(16, 2*len(old)))
	for _, h := range old {
		if h != 0 {
			i, _ := s.slot(h) // each claim is in old once: never found
			s.slots[i] = h
		}
	}
}
