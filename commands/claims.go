package commands

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// Maintain does the periodic upkeep the write side needs: it creates the event-store partitions
// the next appends will need, and deletes the claim chunks of the days before yesterday (UTC):
// no charge is decided on them any more (a clock behind midnight still charges on yesterday).
// `kyapi serve` runs it every minute; it is safe to run from several processes.
func Maintain(ctx context.Context, store *eventstore.Store, now time.Time) (partitions int, chunksDeleted int64, err error) {
	if partitions, err = eventstore.EnsurePartitions(ctx, store.Pool); err != nil {
		return 0, 0, err
	}
	tag, err := store.Pool.Exec(ctx, `DELETE FROM claim_chunks WHERE day < $1::date`, domain.Day(now.UTC().AddDate(0, 0, -1)))
	return partitions, tag.RowsAffected(), err
}

// DefaultMaxClaims bounds the claims a meter keeps in memory (MeterOptions.MaxClaims; `kyapi
// serve` takes METER_MAX_CLAIMS): 45 to 85 MB (a claim takes 11 to 21 bytes of claimSet).
// Past it, the accounts charged longest ago are forgotten; their claims are read again from
// the store when they next need them. Where accounts are charged about evenly (no account
// waits long for its next charge), once the day's claims of the accounts a process charges
// outgrow the bound most batches read some account's whole day back (thousands of claims), and
// the metered path costs more the larger the accounts' days are: about 2.5 times at 1.35 times
// the bound, 12 times at 3.3 times it (docs/operations.md, "The maintenance loop", has the
// measurements). The bound is for the claims a process sees in a busy day, not in a few hours.
const DefaultMaxClaims = 4_000_000

// claimCache holds, for the accounts this process charges, the resources each has paid for on
// its claims day: the same-day dedup state, derived from the account's RequestCharged events
// and never trusted without checking. An entry says what it is current through (a stream
// version); a batch holding the account's lock compares that with the stream's head and, when
// another process or an earlier failure left it behind, reads the events it has not seen
// (Meter.readClaims). accounts.claims_day and claims_from say where an account's claims
// start in its stream; claim chunks (claim_chunks) save them once 240 are unsaved, so that a meter
// holding nothing of an account reads a few rows and the charges after the last one.
type claimCache struct {
	mu       sync.Mutex
	accounts map[int32]*accountClaims
	size     int // hashes held by the entries in accounts
	max      int
	tick     uint64
	day      string // the newest UTC day a batch charged on; older entries are swept when it moves
	// forgotten counts the accounts whose claims were forgotten to stay within max (not those of
	// a day gone by): each is read back from the store when it is next charged.
	forgotten int64
}

// accountClaims is one account's claims. Through version it holds every resource paid by the
// account's charges on day, and no charge up to version is on a later day.
type accountClaims struct {
	day     string
	version int64 // the stream version the entry is current through
	// position is at or below the position of the event at version: every event after
	// version is after it in the stream's position order (the index the reads walk).
	position int64
	hashes   claimSet
	// unsaved are the claims, in the order they were learnt, that this meter has not seen in
	// a claim chunk nor written one for: the next chunk's content (claimChunkSize).
	unsaved []int64
	used    uint64
	cached  bool // in claimCache.accounts (its hashes counted in size)
}

// claimChunkSize is how many unsaved claims of an account make the meter write a claim chunk
// (migration 0015) of all of them: 1,920 bytes of hashes or a little more, a row PostgreSQL
// keeps inline. A batch that pays many rows at once (lists of 100 to many clients of one
// account) can leave thousands unsaved: its chunk holds them all, for every claim up to its
// `through` must be in the chunks, and is stored out of line (TOAST), read in one more lookup.
const claimChunkSize = 240

func newClaimCache(max int) *claimCache {
	if max <= 0 {
		max = DefaultMaxClaims
	}
	return &claimCache{accounts: map[int32]*accountClaims{}, max: max}
}

// lookup returns the account's entry, as it stands now (day, version, position: another batch
// of this process may still be recording its commit in it), and whether it is current through
// the given stream version (the head, read under the account's lock). nil: never charged by
// this process, or forgotten.
func (c *claimCache) lookup(no int32, version int64) (e *accountClaims, seen accountClaims, current bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e = c.accounts[no]
	if e == nil {
		return nil, accountClaims{}, false
	}
	c.tick++
	e.used = c.tick
	return e, accountClaims{day: e.day, version: e.version, position: e.position}, e.version == version
}

// extend adds to e, an entry of the account's claims day behind the head, the claims of the
// charges read after it (Meter.readClaims), making it current through version, at position.
func (c *claimCache) extend(no int32, e *accountClaims, version, position int64, hashes []int64) *accountClaims {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.cached {
		c.size -= e.hashes.len()
		e.cached = false
	}
	e.add(hashes)
	e.version, e.position = version, position
	c.put(no, e)
	return e
}

// has tells whether e holds a claim on day for the resource hash.
func (c *claimCache) has(e *accountClaims, day string, hash int64) bool {
	if e == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.day != day {
		return false
	}
	return e.hashes.has(hash)
}

// load replaces the account's entry with the claims read for it (Meter.readClaims): all of
// day's, current through version (the head, held under the account's lock, at position):
// those saved in claim chunks and those read from the charges after them.
func (c *claimCache) load(no int32, day string, version, position int64, saved, read []int64) *accountClaims {
	e := &accountClaims{day: day, version: version, position: position, hashes: newClaimSet(len(saved) + len(read))}
	for _, h := range saved {
		e.hashes.add(h)
	}
	e.add(read)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put(no, e)
	return e
}

// committed records a batch's charges of one account once its COMMIT succeeded: the stream
// moved from `from` (the head the batch read under the lock, at position) to `to`, and the
// account's charges in it paid for hashes on day; the batch saved the first `saved` of the
// entry's unsaved claims in a chunk. base is the entry the batch decided with, current through
// from; nil when the batch read none because the account had no claims on day (its claims_day
// was another day). An entry already past `to` (another batch of this process read these
// events back) is left alone.
func (c *claimCache) committed(no int32, base *accountClaims, from, to, position int64, day string, hashes []int64, saved int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if base != nil && base.version != from {
		return
	}
	if cur := c.accounts[no]; cur != nil && cur.version >= to {
		return
	}
	var e *accountClaims
	switch {
	case base != nil && (base.day == day || len(hashes) == 0):
		e = base // the same day's claims, or still the old day's
	case len(hashes) > 0:
		e = &accountClaims{day: day, hashes: newClaimSet(len(hashes))} // the day's first claims
	default:
		return // nothing is known of the account's claims: its next batch reads them
	}
	if e.cached {
		c.size -= e.hashes.len()
		e.cached = false
	}
	if e == base {
		e.unsaved = e.unsaved[min(saved, len(e.unsaved)):]
	}
	e.add(hashes)
	e.version, e.position = to, position
	c.put(no, e)
}

// add adds claims the meter learnt (c.mu held, or e not shared yet).
func (e *accountClaims) add(hashes []int64) {
	for _, h := range hashes {
		if e.hashes.add(h) {
			e.unsaved = append(e.unsaved, h)
		}
	}
}

// chunk returns the claims e would save in a chunk now, if there are enough of them.
func (c *claimCache) chunk(e *accountClaims) []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(e.unsaved) < claimChunkSize {
		return nil
	}
	return slices.Clone(e.unsaved)
}

// put makes e the account's entry (c.mu held) and keeps the cache within its bound.
func (c *claimCache) put(no int32, e *accountClaims) {
	if old := c.accounts[no]; old != nil && old.cached {
		c.size -= old.hashes.len()
		old.cached = false
	}
	c.tick++
	e.used, e.cached = c.tick, true
	c.accounts[no] = e
	c.size += e.hashes.len()
	if c.size > c.max {
		c.evict(no)
	}
}

// evict forgets the accounts charged longest ago (never keep, the one being put) until the
// cache holds at most three quarters of its bound.
func (c *claimCache) evict(keep int32) {
	nos := make([]int32, 0, len(c.accounts))
	for no := range c.accounts {
		if no != keep {
			nos = append(nos, no)
		}
	}
	slices.SortFunc(nos, func(a, b int32) int { return cmp.Compare(c.accounts[a].used, c.accounts[b].used) })
	for _, no := range nos {
		if c.size <= c.max*3/4 {
			break
		}
		c.forget(no)
		c.forgotten++
	}
}

func (c *claimCache) forget(no int32) {
	if e := c.accounts[no]; e != nil {
		c.size -= e.hashes.len()
		e.cached = false
		delete(c.accounts, no)
	}
}

// newDay forgets, when a batch first runs on a later UTC day than any before, the entries of
// earlier days: a batch charges on its clock's day or, for an account whose newest event is
// later, on that event's day, never on an earlier one.
func (c *claimCache) newDay(now time.Time) {
	today := domain.Day(now)
	c.mu.Lock()
	defer c.mu.Unlock()
	if today <= c.day {
		return
	}
	c.day = today
	for no, e := range c.accounts {
		if e.day < today {
			c.forget(no)
		}
	}
}

// forgottenForBound is how many accounts' claims were forgotten to stay within the bound
// (Meter.ClaimsForgotten).
func (c *claimCache) forgottenForBound() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgotten
}

// held is how many claims the cache holds (Meter.ClaimsHeld).
func (c *claimCache) held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

const (
	// claimEventsSQL reads the charges of each stream $1 after position $2 and version $3 — or,
	// when the stream has claim chunks of day $4, after the last of them — by the events_stream
	// index from that position: an account's claims after its saved ones (from its
	// claims_from if none), or the charges another process (or a batch whose outcome was
	// lost) added since the meter's claims were current ($4 NULL).
	// The events are read in a subquery that OFFSET 0 keeps from being flattened into a join:
	// the plan a prepared statement settles on would otherwise hash-join the whole events
	// table (it guesses ten streams).
	claimEventsSQL = `SELECT u.no, e.payload::text
		FROM unnest($1::int[], $2::bigint[], $3::bigint[], $4::date[]) AS u(no, after_position, after_version, chunks_day)
		CROSS JOIN LATERAL (SELECT coalesce(max(c.position), u.after_position) AS after_position,
				coalesce(max(c.through), u.after_version) AS after_version
			FROM claim_chunks c WHERE c.stream_no = u.no AND c.day = u.chunks_day) s
		CROSS JOIN LATERAL (SELECT e.payload FROM events e
			WHERE e.stream_no = u.no AND e.position > s.after_position AND e.version > s.after_version
				AND e.type = 'RequestCharged' OFFSET 0) e`
	// claimChunksSQL reads the claim chunks of each stream $1 on day $2.
	claimChunksSQL = `SELECT c.stream_no, c.hashes
		FROM unnest($1::int[], $2::date[]) AS u(no, day) JOIN claim_chunks c ON c.stream_no = u.no AND c.day = u.day`
)

// readClaims gives every account of the batch the claims it decides with (batchAccount.claims),
// holding the accounts' locks. Claims matter only for an account whose claims_day is the day it
// charges on. For those whose cached claims are not current through the head, one round trip
// reads what the cache lacks: for an entry of the same day behind the head (another process
// charged the account, or a batch's outcome was lost), the charges after it; for an account
// the meter holds nothing of (never charged here, or forgotten), the day's claim chunks and
// the charges after the last one (after claims_from if none). Nothing is read when every
// cache is current.
func (m *Meter) readClaims(ctx context.Context, pc *pgx.Conn, accounts map[string]*batchAccount) error {
	var nos []int32
	var afterPositions, afterVersions []int64
	var chunkDays []*string
	var coldNos []int32
	var coldDays []string
	stale := map[int32]*accountClaims{}
	for _, a := range accounts {
		if a.head == nil {
			continue
		}
		e, seen, current := m.claims.lookup(a.no, a.from.Version)
		switch {
		case current:
			a.claims = e
		case a.claimsDay != a.day:
			// No charge of the account is on its day yet: nothing to read.
		case e != nil && seen.day == a.claimsDay && seen.version < a.from.Version:
			stale[a.no] = e
			nos, afterPositions, afterVersions = append(nos, a.no), append(afterPositions, seen.position), append(afterVersions, seen.version)
			chunkDays = append(chunkDays, nil)
		default:
			stale[a.no] = nil
			nos, afterPositions, afterVersions = append(nos, a.no), append(afterPositions, a.claimsFrom-1), append(afterVersions, 0)
			chunkDays = append(chunkDays, &a.claimsDay)
			coldNos, coldDays = append(coldNos, a.no), append(coldDays, a.claimsDay)
		}
	}
	if len(nos) == 0 {
		return nil
	}
	if m.opts.OnClaimsRead != nil {
		m.opts.OnClaimsRead(len(nos)-len(coldNos), len(coldNos))
	}
	b := &pgx.Batch{}
	if len(coldNos) > 0 {
		b.Queue(claimChunksSQL, coldNos, coldDays)
	}
	b.Queue(claimEventsSQL, nos, afterPositions, afterVersions, chunkDays)
	br := pc.SendBatch(ctx, b)
	days := make(map[int32]string, len(stale))
	for _, a := range accounts {
		if _, ok := stale[a.no]; ok {
			days[a.no] = a.claimsDay
		}
	}
	saved, read, err := readClaimRows(br, len(coldNos) > 0, days)
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	for _, a := range accounts {
		base, ok := stale[a.no]
		if !ok {
			continue
		}
		if base != nil {
			a.claims = m.claims.extend(a.no, base, a.from.Version, a.from.Position, read[a.no])
		} else {
			a.claims = m.claims.load(a.no, a.claimsDay, a.from.Version, a.from.Position, saved[a.no], read[a.no])
		}
	}
	return nil
}

// readClaimRows reads the claim chunks (when queued) and the charges readClaims asked for,
// each account's claims of days[no]: a charge of the first store decided on another day (its
// payload says so) claims nothing on it.
func readClaimRows(br pgx.BatchResults, chunks bool, days map[int32]string) (saved, read map[int32][]int64, err error) {
	saved, read = map[int32][]int64{}, map[int32][]int64{}
	var no int32
	var raw []byte
	if chunks {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, err
		}
		if _, err := pgx.ForEachRow(rows, []any{&no, &raw}, func() error {
			for i := 0; i+8 <= len(raw); i += 8 {
				saved[no] = append(saved[no], int64(binary.BigEndian.Uint64(raw[i:])))
			}
			return nil
		}); err != nil {
			return nil, nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	_, err = pgx.ForEachRow(rows, []any{&no, &raw}, func() error {
		f, err := domain.DecodeAccountFact(domain.EventRequestCharged, raw)
		if err != nil {
			return err
		}
		if f.Day != "" && f.Day != days[no] {
			return nil
		}
		for _, r := range f.Paid {
			read[no] = append(read[no], domain.ResourceHash(r))
		}
		return nil
	})
	return saved, read, err
}

// chunks are the claim chunks a batch saves: for each account it writes whose unsaved claims
// of the day reached claimChunkSize, those claims, covering its charges up to the head the
// batch read.
func (m *Meter) chunks(accountIDs []string, accounts map[string]*batchAccount) []any {
	var nos []int32
	var days []string
	var through, positions []int64
	var hashes [][]byte
	for _, id := range accountIDs {
		a := accounts[id]
		if a == nil || !a.written || a.claims == nil || a.claims.day != a.day {
			continue
		}
		c := m.claims.chunk(a.claims)
		if c == nil {
			continue
		}
		raw := make([]byte, 8*len(c))
		for i, h := range c {
			binary.BigEndian.PutUint64(raw[8*i:], uint64(h))
		}
		a.saved = len(c)
		nos, days, through, positions, hashes = append(nos, a.no), append(days, a.day), append(through, a.from.Version), append(positions, a.from.Position), append(hashes, raw)
	}
	return []any{nos, days, through, positions, hashes}
}

// remember tells the claim cache what a committed batch's charges of account a paid for and
// saved.
func (m *Meter) remember(a *batchAccount) {
	paid := make([]int64, 0, len(a.paid))
	for h := range a.paid {
		paid = append(paid, h)
	}
	m.claims.committed(a.no, a.claims, a.from.Version, a.head.Version, a.from.Position, a.day, paid, a.saved)
}
