package audit

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/jackc/pgx/v5"

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
// all folded (a state recorded before the claims were). A segment of a long stream after its
// first keeps the claims of the day it starts in apart (openingClaims), and they are checked
// against the segments before it when it is merged with them (mergeClaims), so a cut changes
// nothing. Resources are kept as 128-bit hashes (two seeded maphash sums): no allocation per
// resource, and no two of a day's resources collide in practice.
type dayClaims struct {
	day      string // the claim day the set holds; "" before the first charge read
	complete bool   // every charge of day was read
	// before is the UTC day of the last event before what was read ("" when the stream was
	// read from its first event): a later day is complete.
	before  string
	started bool
	set     claimSet
	listed  int
}

// claimSet is a set of resources as claimKey hashes them.
type claimSet = map[[2]uint64]struct{}

// openingClaims are a segment's claims of the day it starts in, read before any later day:
// those the segment alone cannot judge, for the segments before it may have paid on that day
// too. reading is true until the segment reads a later day (or its end). The resources are
// named, when one breaks the rule, by reading the segment's events of that day again
// (mergeClaims): only a store with a difference pays for that.
type openingClaims struct {
	reading  bool
	from, to int64    // the segment's positions
	day      string   // the claim day of the segment's first charge ("" before one)
	paid     claimSet // resources paid that day in the segment
	free     claimSet // resources served free that day before the segment saw them paid
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
	if f.Day != "" && at.After(s.a.firstStoreEnd) {
		s.diff("account %s v%d (position %d): recorded at %s, after the first store was carried over (%s), it says it was decided on %s: only a charge of the first store may; it is checked as one of the day it was recorded on",
			s.info.account, version, position, at.Format(time.RFC3339Nano), s.a.firstStoreEnd.UTC().Format(time.RFC3339Nano), f.Day)
	}
	day := s.factDay(f, at)
	switch {
	case day < c.day:
		return // a first-store charge of the day before, carried past midnight: its day is done
	case day > c.day:
		if o := s.opening; o != nil && o.reading {
			if c.day == "" {
				o.day = day
			} else { // the opening day ends: its claims wait for the merge
				o.paid, c.set, o.reading = c.set, nil, false
			}
		}
		c.day, c.complete = day, c.before == "" || c.before < day
		if c.set == nil {
			c.set = claimSet{}
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
		if o := s.opening; o != nil && o.reading {
			for _, r := range f.Deduplicated {
				if k := claimKey(r); !hasKey(c.set, k) {
					if o.free == nil {
						o.free = claimSet{}
					}
					o.free[k] = struct{}{}
				}
			}
		}
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

// factDay is the claim day of a metered fact recorded at at: the UTC day of at, or for a charge
// of the first store the day it was decided on (domain.AccountFact.Day).
func (s *streamState) factDay(f *domain.AccountFact, at time.Time) string {
	if f.Day != "" && !at.After(s.a.firstStoreEnd) {
		return f.Day
	}
	return s.dayOf(at)
}

func hasKey(set claimSet, k [2]uint64) bool {
	_, ok := set[k]
	return ok
}

// endSegment ends the reading of a segment: a segment that never left the day it started in
// has its whole day's claims as its opening ones.
func (s *streamState) endSegment() {
	if o := s.opening; o != nil && o.reading {
		o.paid, o.reading = s.dayClaims.set, false
	}
}

// mergeClaims checks the opening claims of next, the stream's segment after the ones merged in
// s, against the claims s holds of that day (a resource paid on both sides of the cut was paid
// twice; one served free after the cut that neither side saw paid was given away), then takes
// next's claims as the stream's newest day's. Resources are named by reading their event again
// (in tx, on the audit's snapshot): at most claimDiffsListed of each kind per cut.
func (s *streamState) mergeClaims(ctx context.Context, tx pgx.Tx, next *streamState) error {
	c, n, o := &s.dayClaims, &next.dayClaims, next.opening
	next.opening = nil
	known := false // s read the day next starts in whole
	if o != nil && o.day != "" {
		var err error
		if known, err = s.checkOpening(ctx, tx, next.info.head.No, o); err != nil {
			return err
		}
	}
	switch {
	case n.day == "": // next read no charge
	case n.day == c.day: // next read one day, the one s ends in
		for k := range n.set {
			c.set[k] = struct{}{}
		}
	case n.day < c.day: // next read only first-store charges of a day before: s's day goes on
	default: // next ends on a later day: its own, whole if next read it from its start or s read its start
		c.day, c.set = n.day, n.set
		c.complete = n.complete || o != nil && n.day == o.day && known
	}
	c.listed += n.listed
	n.set = nil
	return nil
}

// checkOpening checks the opening claims o of the segment of stream no after those merged in s:
// a resource it paid that s paid that day too was paid twice; one it served free before paying
// it, that s did not pay that day either, was given away (when s read that day whole: it ends
// in it with every charge of it read, or it ends on an earlier day and read the stream from
// before it, so nothing was paid that day before the cut).
func (s *streamState) checkOpening(ctx context.Context, tx pgx.Tx, no int32, o *openingClaims) (known bool, err error) {
	c := &s.dayClaims
	same := o.day == c.day && c.set != nil
	known = same && c.complete || c.started && o.day > c.day && (c.before == "" || c.before < o.day)
	again, free := claimSet{}, claimSet{}
	if same {
		for k := range o.paid {
			if hasKey(c.set, k) {
				again[k] = struct{}{}
			}
		}
	}
	if known {
		for k := range o.free {
			if !same || !hasKey(c.set, k) {
				free[k] = struct{}{}
			}
		}
	}
	if len(again) == 0 && len(free) == 0 {
		return known, nil
	}
	// Read the segment's charges of that day again, in order, as claims read them, for the
	// versions, positions and names of the resources found.
	rows, err := tx.Query(ctx, `SELECT version, position, type, payload::text, recorded_at FROM events
		WHERE stream_no = $1 AND position BETWEEN $2 AND $3 AND type IN ($4, $5) ORDER BY position`,
		no, o.from, o.to, domain.EventRequestCharged, domain.EventRequestDeduplicated)
	if err != nil {
		return known, err
	}
	defer rows.Close()
	paid := claimSet{} // in the segment so far, of the keys looked for
	for rows.Next() && (len(again) > 0 || len(free) > 0) {
		var version, position int64
		var typ, payload string
		var at time.Time
		if err := rows.Scan(&version, &position, &typ, &payload, &at); err != nil {
			return known, err
		}
		f, err := domain.DecodeAccountFact(typ, []byte(payload))
		if err != nil {
			continue // named by the segment's own reading
		}
		if day := s.factDay(&f, at); day != o.day {
			if day > o.day {
				break
			}
			continue
		}
		for _, r := range f.Paid {
			k := claimKey(r)
			if hasKey(again, k) {
				delete(again, k)
				s.claimDiff("account %s v%d (position %d): %s paid again on %s: a resource is charged once per UTC day",
					s.info.account, version, position, r, o.day)
			}
			if hasKey(free, k) {
				paid[k] = struct{}{}
			}
		}
		for _, r := range f.Deduplicated {
			if k := claimKey(r); hasKey(free, k) && !hasKey(paid, k) {
				s.claimDiff("account %s v%d (position %d): %s served free (deduplicated) on %s, where the account had not paid for it",
					s.info.account, version, position, r, o.day)
			}
		}
	}
	return known, rows.Err()
}
