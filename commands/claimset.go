package commands

// claimSet is a set of resource hashes (ResourceHash) kept in a flat table of int64s, open
// addressing with linear probing: about 11 to 21 bytes a claim (the table is at most three
// quarters full and doubles when it would be fuller), where a Go map takes about 26, and
// nothing in it for the garbage collector to scan. A meter holds millions of them (the
// claims of the day of every account it charges: MeterOptions.MaxClaims), so the bytes a
// claim takes decide how many fit before the meter must forget accounts and read their
// claims back from the store.
//
// Resource hashes are the first 8 bytes of a SHA-256, so their low bits are already uniform:
// they index the table as they are. 0 marks an empty slot; the claim 0 itself is kept aside.
type claimSet struct {
	slots   []int64
	n       int // claims in slots
	hasZero bool
}

// newClaimSet returns a set sized for about n claims.
func newClaimSet(n int) claimSet {
	var s claimSet
	if n > 0 {
		s.slots = make([]int64, tableSize(n))
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

// has tells whether h is in the set.
func (s *claimSet) has(h int64) bool {
	if h == 0 {
		return s.hasZero
	}
	if len(s.slots) == 0 {
		return false
	}
	mask := uint64(len(s.slots) - 1)
	for i := uint64(h) & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return true
		case 0:
			return false
		}
	}
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
	mask := uint64(len(s.slots) - 1)
	for i := uint64(h) & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return false
		case 0:
			s.slots[i] = h
			s.n++
			return true
		}
	}
}

// grow doubles the table (or makes the first one) and places every claim again.
func (s *claimSet) grow() {
	old := s.slots
	s.slots = make([]int64, max(16, 2*len(old)))
	mask := uint64(len(s.slots) - 1)
	for _, h := range old {
		if h == 0 {
			continue
		}
		i := uint64(h) & mask
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = h
	}
}
