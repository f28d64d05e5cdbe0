package audit

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// DigestReport is the outcome of verifying a store against a digest.
type DigestReport struct {
	Streams     int   // streams the digest covers
	Events      int64 // events read at or below the digest's position
	Differences []string
}

// VerifyDigest checks the store against a digest taken earlier (check the document itself
// with CheckDigest first): every event at or below the digest's position must still be
// there, unchanged, in the chain of a head the digest holds. Each stream's chain is
// recomputed from the events' content, not read from their stored hashes, so a history
// rewritten and re-chained to match — write model and read models moved back with it — still
// differs from the digest. A stream with archived history is recomputed from its boundary
// (the chain hash of its last archived event). Every stream number is read, those with no
// row in streams too. workers (0: the number of CPUs) streams are checked at once.
func VerifyDigest(ctx context.Context, pool *pgxpool.Pool, d Digest, workers int) (DigestReport, error) {
	rep := DigestReport{Streams: len(d.Heads)}
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	want := make(map[string]digestHead, len(d.Heads))
	for _, h := range d.Heads {
		hash, err := decodeHash(h.Hash)
		if err != nil {
			return rep, fmt.Errorf("digest: head of stream %s: %w", h.Stream, err)
		}
		want[h.Stream] = digestHead{version: h.Version, hash: hash}
	}
	// One snapshot for the whole check, as the audit's: the stream ids, the boundaries and the
	// events describe the same moment, whatever an archive does meanwhile.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return rep, err
	}
	defer conn.Release()
	tx, snapshot, err := exportSnapshot(ctx, conn)
	if err != nil {
		return rep, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	ids, err := eventstore.StreamIDs(ctx, tx)
	if err != nil {
		return rep, err
	}
	nos := make([]int32, 0, len(ids))
	for no := range ids {
		nos = append(nos, no)
	}
	slices.Sort(nos)

	var mu sync.Mutex
	var diffs []string
	differ := func(format string, args ...any) {
		mu.Lock()
		diffs = append(diffs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// Archived history: a stream's chain is recomputed from its boundary, the chain hash of
	// its last archived event, which the archive file's own hash vouches for; the boundary's
	// recorded last event must hash to it (startAt).
	boundaries, err := eventstore.BoundariesBetween(ctx, tx, math.MinInt32, math.MaxInt32)
	if err != nil {
		return rep, err
	}
	// Ranges of stream numbers holding about the same number of covered events. Together
	// they cover every number, those of no stream too: an event inserted under a number with
	// no row in streams is read, and differs.
	var ranges [][2]int32
	var perRange int64 = max(d.Events/int64(workers*4), 10_000)
	var acc int64
	lo := int32(math.MinInt32)
	for i, no := range nos {
		acc += want[ids[no]].version + 1
		if acc >= perRange || i == len(nos)-1 {
			hi := no
			if i == len(nos)-1 {
				hi = math.MaxInt32
			}
			ranges = append(ranges, [2]int32{lo, hi})
			lo, acc = no+1, 0
		}
	}
	if len(ranges) == 0 {
		ranges = [][2]int32{{math.MinInt32, math.MaxInt32}}
	}
	var events int64
	seen := make(map[string]bool, len(d.Heads))
	work := make(chan [2]int32)
	errs := make(chan error, len(ranges))
	var wg sync.WaitGroup
	for range min(workers, len(ranges)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := onSnapshot(ctx, pool, snapshot, func(q pgx.Tx) error {
				for r := range work {
					if err := verifyRange(ctx, q, d.Position, r, ids, want, boundaries, &mu, seen, &events, differ); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				errs <- err
			}
		}()
	}
	// A worker that fails stops: hand out ranges only while none has, or the last ones
	// would wait forever for a worker.
	var failed error
handOut:
	for _, r := range ranges {
		select {
		case work <- r:
		case failed = <-errs:
			break handOut
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if failed == nil {
		failed = <-errs
	}
	if failed != nil {
		return rep, failed
	}
	// Streams of the digest of which no event at or below its position is left: the digest's
	// head must then be the stream's archived boundary itself.
	for _, h := range d.Heads {
		if seen[h.Stream] {
			continue
		}
		if b, ok := boundaries[h.Stream]; ok {
			st := verifyState{id: h.Stream, want: want[h.Stream], inDigest: true}
			st.startAt(b, differ)
			st.finish(d.Position, differ)
			continue
		}
		differ("stream %s: missing: the digest covers versions 1 to %d, the store holds none of them at or below position %d",
			h.Stream, h.Version, d.Position)
	}
	if err := checkBackdated(ctx, tx, d, ids, want, differ); err != nil {
		return rep, err
	}
	if err := checkArchivedRanges(ctx, tx, differ); err != nil {
		return rep, err
	}
	if d.Format != digestFormatV1 {
		legacy, err := legacyRoot(ctx, tx)
		if err != nil {
			return rep, err
		}
		if legacy != d.Legacy {
			differ("legacy boundaries: the archive boundaries trusted without their last archived event fold into %s…, the digest signed %.16s…: one was added (or changed) since, which lets its boundary carry any balance",
				legacy[:16], d.Legacy)
		}
	}
	rep.Events = events
	rep.Differences = diffs
	sort.Strings(rep.Differences)
	return rep, nil
}

type digestHead struct {
	version int64
	hash    [32]byte
}

// verifyState follows one stream through the covered events.
type verifyState struct {
	no       int32
	id       string
	want     digestHead
	inDigest bool

	version  int64    // the last version read
	computed [32]byte // the chain recomputed from the content of the events read
	edited   bool     // an event's stored hash already differed from its content: reported
	broken   bool     // versions did not follow each other: reported
	inserted bool     // an event beyond the digest's head: reported
}

// startAt starts the chain at the stream's archived boundary, having checked the boundary
// against the last event it records (archive.CheckBoundary) and an account's archived totals
// and daily sums against the balance that event vouches for (archive.CheckArchivedSums): the
// chain from there on, or the
// digest's head when it is the boundary, then vouches for the boundary and so for an account's
// balance there. A digest whose head lies inside the archived history cannot be checked until
// the archive is restored: that is a difference, named as such.
func (s *verifyState) startAt(b eventstore.Boundary, differ func(string, ...any)) {
	if !s.inDigest {
		return
	}
	st, err := archive.DecodeAccountState(b.Account)
	if err == nil {
		var balance int64
		balance, err = archive.CheckBoundary(b, st)
		for _, e := range archive.CheckArchivedSums(b, st, balance) {
			differ("%v", e)
		}
	} else {
		err = fmt.Errorf("stream %s: archived boundary v%d: its state cannot be read: %v", s.id, b.Version, err)
	}
	if err != nil {
		differ("%v", err)
	}
	s.version, s.computed = b.Version, b.Hash
	if s.want.version < b.Version {
		differ("stream %s: archived: the digest covers versions 1 to %d, all archived since (the store starts after v%d); verify it after kyapi restore",
			s.id, s.want.version, b.Version)
		s.broken = true
	}
}

func (s *verifyState) add(e *eventstore.Event, position int64, differ func(string, ...any)) {
	if !s.inDigest {
		if !s.inserted {
			differ("stream %s v%d (position %d): inserted: at or below the digest's position %d, in a stream the digest does not hold",
				s.id, e.Version, e.Position, position)
			s.inserted = true
		}
		return
	}
	switch {
	case e.Version > s.want.version:
		if !s.inserted {
			differ("stream %s v%d (position %d): inserted: at or below the digest's position %d, after the version it covers (v%d)",
				s.id, e.Version, e.Position, position, s.want.version)
			s.inserted = true
		}
		return
	case e.Version == s.version+1:
	case e.Version <= s.version:
		differ("stream %s v%d (position %d): inserted: a version %d after version %d", s.id, e.Version, e.Position, e.Version, s.version)
		s.broken = true
	default:
		differ("stream %s: missing: versions %d to %d of the %d the digest covers are not in the store (the next one, v%d, is at position %d)",
			s.id, s.version+1, e.Version-1, s.want.version, e.Version, e.Position)
		s.broken = true
	}
	e.StreamID = s.id
	next := eventstore.EventHash(s.computed, s.id, e.Version, e.Type, e.Payload, e.RawMetadata, e.RecordedAt)
	if next != e.Hash && !s.edited && !s.broken {
		differ("stream %s v%d (position %d): edited: its content does not hash to its stored chain hash", s.id, e.Version, e.Position)
		s.edited = true
	}
	s.computed, s.version = next, e.Version
}

// finish compares the chain read with the digest's head.
func (s *verifyState) finish(position int64, differ func(string, ...any)) {
	if !s.inDigest {
		return
	}
	switch {
	case s.version < s.want.version && !s.broken:
		differ("stream %s: truncated: the digest covers versions 1 to %d, the store holds only %d at or below position %d",
			s.id, s.want.version, s.version, position)
	case s.version == s.want.version && s.computed != s.want.hash && !s.edited && !s.broken:
		differ("stream %s: re-chained: its events 1 to %d hash to %x…, the digest holds %x…: history at or before v%d was rewritten and its hashes recomputed",
			s.id, s.want.version, s.computed[:6], s.want.hash[:6], s.want.version)
	}
}

// verifyRange checks the covered events of the streams numbered r[0] to r[1].
func verifyRange(ctx context.Context, q eventstore.Querier, position int64, r [2]int32, ids map[int32]string,
	want map[string]digestHead, boundaries map[string]eventstore.Boundary, mu *sync.Mutex, seen map[string]bool, events *int64,
	differ func(string, ...any)) error {
	var cur *verifyState
	var n int64
	finish := func() {
		if cur != nil {
			cur.finish(position, differ)
			mu.Lock()
			seen[cur.id] = true
			mu.Unlock()
		}
	}
	err := eventstore.ScanUpTo(ctx, q, position, r[0], r[1], func(no int32, e *eventstore.Event) error {
		n++
		if cur == nil || cur.no != no {
			finish()
			id, known := ids[no]
			if !known {
				id = fmt.Sprintf("#%d (a stream number with no row in streams)", no)
			}
			h, ok := want[id]
			cur = &verifyState{no: no, id: id, want: h, inDigest: ok}
			if b, archived := boundaries[id]; archived && known {
				cur.startAt(b, differ)
			}
		}
		cur.add(e, position, differ)
		return nil
	})
	finish()
	mu.Lock()
	*events += n
	mu.Unlock()
	return err
}

// backdateTolerance is how much earlier than a digest's taken_at an honest account event after
// it may be recorded: a charge batch reads its clock before it gets a connection (at most
// 10 s), an account command once it holds the account, and processes' clocks differ a little.
// Taking a digest waits for every transaction running when it started, so no honest event
// after it is older than that.
const backdateTolerance = time.Minute

// checkBackdated reads, for every account stream, its first event after the digest (after the
// head the digest holds, or the stream's first for one it does not hold): recorded more than
// backdateTolerance before the digest was taken, it was appended after the digest into the
// time the digest closed, rewriting balance-at and statements of that time. Within a stream
// time never goes backwards, so the first such event is the earliest.
func checkBackdated(ctx context.Context, tx pgx.Tx, d Digest, ids map[int32]string, want map[string]digestHead,
	differ func(string, ...any)) error {
	var nos []int32
	var after []int64
	for no, id := range ids {
		if domain.AccountOfStream(id) == "" {
			continue
		}
		nos, after = append(nos, no), append(after, want[id].version)
	}
	if len(nos) == 0 {
		return nil
	}
	limit := d.TakenAt.Add(-backdateTolerance)
	rows, err := tx.Query(ctx, `SELECT u.no, e.version, e.position, e.recorded_at
		FROM unnest($1::int[], $2::bigint[]) AS u(no, after)
		CROSS JOIN LATERAL (SELECT version, position, recorded_at FROM events e
			WHERE e.stream_no = u.no AND e.version > u.after ORDER BY e.version LIMIT 1) e
		WHERE e.position > $3 AND e.recorded_at < $4`, nos, after, d.Position, limit)
	if err != nil {
		return err
	}
	var no int32
	var version, position int64
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&no, &version, &position, &at}, func() error {
		differ("stream %s v%d (position %d): back-dated: recorded at %s, after the digest's position %d but %s before it was taken (%s): history the digest closed (balance-at, statements) was changed after it",
			ids[no], version, position, at.UTC().Format(time.RFC3339Nano), d.Position, d.TakenAt.Sub(at).Round(time.Second), d.TakenAt.UTC().Format(time.RFC3339Nano))
		return nil
	})
	return err
}
