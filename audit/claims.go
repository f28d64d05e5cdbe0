package audit

import (
	"hash/maphash"
	"time"

	"github.com/kyapi/kyapi/domain"
)

// claimDiffsListed bounds the same-day lines a stream's report holds; past it, one line says so.
const claimDiffsListed = 10

// dayClaims are the resources an account paid for on one UTC day, as the audit reads its
// charges in order: the rule that a resource is charged once per account and UTC day (the
// meter's dedup claims, docs/api.md) replayed. A resource paid again the same day was charged
// twice; one served free (deduplicated) that was not paid earlier that day was given away.
//
// The latter can be told only for a day whose start the audit read: a stream read from a
// segment's start or a range's start may have paid a resource earlier that day, before what
// was read. At an archived boundary the set starts with the resources its state says were paid
// on its day before it (archive.DayClaims), whole unless its archived facts of that day were not
// all folded (a state recorded before the claims were). Resources are kept as 128-bit hashes (two seeded maphash
// sums): no allocation per resource, and no two of a day's resources collide in practice.
type dayClaims struct {
	day      string // the claim day the set holds; "" before the first charge read
	complete bool   // every charge of day was read
	// before is the UTC day of the last event before what was read ("" when the stream was
	// read from its first event): a later day is complete.
	before  string
	started bool
	set     map[[2]uint64]struct{}
	listed  int
}

var claimSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func claimKey(r string) [2]uint64 {
	return [2]uint64{maphash.String(claimSeeds[0], r), maphash.String(claimSeeds[1], r)}
}

// readFrom records where the reading of the stream starts: at its first event, or after an
// event of time at (an archived boundary's, a segment's or a range's previous event).
func (c *dayClaims) readFrom(at time.Time) {
	if !c.started {
		c.started = true
		if !at.IsZero() {
			c.before = domain.Day(at)
		}
	}
}

// claims checks a metered fact recorded at `at` against the day's claims and adds what it paid.
func (s *streamState) claims(f *domain.AccountFact, version int64, position int64, at time.Time) {
	c := &s.dayClaims
	day := f.Day // a charge of the first store: the day it was decided on
	if day == "" {
		day = s.dayOf(at)
	}
	switch {
	case day < c.day:
		return // a first-store charge of the day before, carried past midnight: its day is done
	case day > c.day:
		c.day, c.complete = day, c.before == "" || c.before < day
		if c.set == nil {
			c.set = map[[2]uint64]struct{}{}
		}
		clear(c.set)
	}
	for _, r := range f.Paid {
		k := claimKey(r)
		if _, paid := c.set[k]; paid {
			s.claimDiff("account %s v%d (position %d): %s paid again on %s: a resource is charged once per UTC day",
				s.info.account, version, position, r, day)
			continue
		}
		c.set[k] = struct{}{}
	}
	if !c.complete {
		return
	}
	for _, r := range f.Deduplicated {
		if _, paid := c.set[claimKey(r)]; !paid {
			s.claimDiff("account %s v%d (position %d): %s served free (deduplicated) on %s, where the account had not paid for it",
				s.info.account, version, position, r, day)
		}
	}
}

func (s *streamState) claimDiff(format string, args ...any) {
	c := &s.dayClaims
	c.listed++
	switch {
	case c.listed <= claimDiffsListed:
		s.diff(format, args...)
	case c.listed == claimDiffsListed+1:
		s.diff("account %s: more charges break the once-a-day rule; the first %d are listed", s.info.account, claimDiffsListed)
	}
}
