// Package audit replays the event store and checks it against itself, the write model and the
// read models: every stream's hash chain, versions and times; every account's balance folded
// event by event; the account rows, balances and daily sums, and the usage per place and day, as
// of one snapshot.
//
// The audit streams: it keeps a running state per stream, never the events, so its memory
// does not grow with history. Work is split between workers by stream (and long streams into
// segments between stream marks, each checked from the event before it); every worker reads
// the same exported snapshot, so a store under live traffic audits clean. Read models are
// compared with the events up to their own checkpoint, read in that snapshot too: a projection
// that lags is not a difference.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// Options choose what an audit covers and how it runs. The zero value audits everything.
type Options struct {
	// Out receives one "DIFF ..." line per difference, at the end, sorted.
	Out io.Writer
	// AccountID audits that account's stream only.
	AccountID string
	// FromPosition and ToPosition (inclusive; 0 = unbounded) audit only the events in that
	// range: chains, versions, times and balance arithmetic, each stream starting from the
	// event just before the range. Account rows and read models are compared only when the
	// range is unbounded.
	FromPosition, ToPosition int64
	// Workers is the number of streams audited at once (default: the number of CPUs).
	Workers int
	// SegmentEvents is the size above which a stream is split into segments audited in
	// parallel (default 250,000).
	SegmentEvents int64
	// Progress, when set, is called about twice a second and once at the end.
	Progress func(Progress)
}

// Progress is how far an audit has got.
type Progress struct {
	Events  int64 // events checked so far
	Total   int64 // events the audit will check
	Elapsed time.Duration
}

// Report is the outcome of an audit.
type Report struct {
	Accounts    int
	Streams     int
	Events      int64
	Differences []string
	// ArchivedBefore is where archived history ends (0: nothing is archived): every stream was
	// audited from its state there (docs/operations.md, "Retention and archiving").
	ArchivedBefore int64
	ArchivedEvents int64
}

// checkpointed are the read models the audit compares, by projection name.
const (
	balancesProjection    = "balances"
	accountDaysProjection = "account_days"
)

// auditor is one audit run: its scope, snapshot and results.
type auditor struct {
	opts        Options
	snapshot    string
	checkpoints map[string]eventstore.Position
	whole       bool // every event of the streams in scope: heads and read models are compared
	// firstStoreEnd is when the first store's events were carried over (migration 0005): only
	// a charge recorded before it may say which day it was decided on (domain.AccountFact.Day).
	firstStoreEnd time.Time

	events atomic.Int64

	mu       sync.Mutex
	diffs    []string
	segments map[int32]*segmented
	accounts int

	pool  *pgxpool.Pool
	usage usageTally // a whole-store audit's count of the usage ledger
}

// auditsUsage: the usage read model sums every account, so only a whole-store audit has all it
// counts.
func (a *auditor) auditsUsage() bool { return a.whole && a.opts.AccountID == "" }

// ErrRangeArchived: the positions an audit was asked for all lie in archived history, which it
// does not read (every stream starts from its archived boundary): it would audit no event.
var ErrRangeArchived = errors.New("audit: the range asked for is archived")

// Run audits the store in pool.
func Run(ctx context.Context, pool *pgxpool.Pool, opts Options) (Report, error) {
	if opts.Workers <= 0 {
		opts.Workers = runtime.NumCPU()
	}
	if opts.SegmentEvents <= 0 {
		opts.SegmentEvents = 250_000
	}
	if opts.ToPosition == 0 {
		opts.ToPosition = 1<<63 - 1
	}
	a := &auditor{opts: opts, segments: map[int32]*segmented{}, pool: pool,
		whole: opts.FromPosition == 0 && opts.ToPosition == 1<<63-1}
	defer a.usage.close()

	// One snapshot for the whole audit: exported by this transaction, imported by every worker.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return Report{}, err
	}
	defer conn.Release()
	tx, snapshot, err := exportSnapshot(ctx, conn)
	if err != nil {
		return Report{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	a.snapshot = snapshot
	if a.checkpoints, err = readCheckpoints(ctx, tx); err != nil {
		return Report{}, err
	}
	// The first store's events were carried over by migration 0005: every one was recorded
	// before it was applied.
	err = tx.QueryRow(ctx, `SELECT applied_at FROM schema_migrations WHERE name = '0005_event_store_v2.sql'`).Scan(&a.firstStoreEnd)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Report{}, err
	}
	streams, err := readStreams(ctx, tx, opts.AccountID)
	if err != nil {
		return Report{}, err
	}
	if opts.AccountID != "" && len(streams) == 0 {
		return Report{}, domain.ErrAccountNotFound
	}
	units, total, err := a.plan(ctx, tx, streams)
	if err != nil {
		return Report{}, err
	}
	archives, err := eventstore.Archives(ctx, tx)
	if err != nil {
		return Report{}, err
	}
	var archivedBefore, archivedEvents int64
	for _, ar := range archives {
		archivedBefore, archivedEvents = ar.To, archivedEvents+ar.Events
	}
	total = max(total-archivedEvents, 0)
	if opts.ToPosition < archivedBefore {
		return Report{}, fmt.Errorf("%w: positions up to %d lie in the history archived before position %d (%d events), which the audit does not read: "+
			"put that range back with kyapi restore to audit it, or audit from position %d", ErrRangeArchived, opts.ToPosition, archivedBefore, archivedEvents, archivedBefore)
	}

	// Payments and bonuses counted once: PostgreSQL groups them on the snapshot's own
	// connection, idle while the workers read the streams.
	var once chan error
	if a.whole {
		var scope *streamInfo
		if opts.AccountID != "" {
			scope = &streams[0]
		}
		once = make(chan error, 1)
		go func() { once <- a.countedOnce(ctx, tx, scope) }()
	}

	// The catalog's read models, on a connection of their own while the workers read the
	// streams.
	var catalog chan error
	if a.auditsUsage() {
		catalog = make(chan error, 1)
		go func() {
			catalog <- onSnapshot(ctx, pool, a.snapshot, func(tx pgx.Tx) error { return a.compareCatalog(ctx, tx) })
		}()
	}

	start := time.Now()
	stopProgress := a.reportProgress(total, start)
	work := make(chan unit)
	errc := make(chan error, opts.Workers)
	var wg sync.WaitGroup
	for range opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.worker(ctx, pool, work); err != nil {
				errc <- err
			}
		}()
	}
	var sendErr error
	for _, u := range units {
		select {
		case work <- u:
		case err := <-errc:
			sendErr = err
		}
		if sendErr != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	stopProgress()
	close(errc)
	if sendErr == nil {
		sendErr = <-errc
	}
	for _, c := range []chan error{once, catalog} {
		if c != nil {
			if err := <-c; sendErr == nil {
				sendErr = err
			}
		}
	}
	if sendErr != nil {
		return Report{}, sendErr
	}
	if a.whole {
		var scope int32 // every stream's marks, or the audited account's
		if opts.AccountID != "" {
			scope = streams[0].head.No
		}
		if err := a.checkMarks(ctx, tx, scope); err != nil {
			return Report{}, err
		}
		if err := a.checkClaimChunks(ctx, tx, scope); err != nil {
			return Report{}, err
		}
		if err := checkArchivedRanges(ctx, tx, a.differ); err != nil {
			return Report{}, err
		}
	}
	if a.auditsUsage() {
		if err := a.orphans(ctx, tx); err != nil {
			return Report{}, err
		}
		if err := a.compareUsage(ctx, tx, archivedEvents > 0); err != nil {
			return Report{}, err
		}
	}

	sort.Strings(a.diffs)
	if opts.Out != nil {
		for _, d := range a.diffs {
			fmt.Fprintln(opts.Out, "DIFF", d)
		}
	}
	return Report{Accounts: a.accounts, Streams: len(streams), Events: a.events.Load(), Differences: a.diffs,
		ArchivedBefore: archivedBefore, ArchivedEvents: archivedEvents}, nil
}

func (a *auditor) differ(format string, args ...any) {
	a.mu.Lock()
	a.diffs = append(a.diffs, fmt.Sprintf(format, args...))
	a.mu.Unlock()
}

func (a *auditor) reportProgress(total int64, start time.Time) (stop func()) {
	if a.opts.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				a.opts.Progress(Progress{Events: a.events.Load(), Total: total, Elapsed: time.Since(start)})
			case <-done:
				a.opts.Progress(Progress{Events: a.events.Load(), Total: total, Elapsed: time.Since(start)})
				return
			}
		}
	}()
	return func() { close(done); <-finished }
}

func readCheckpoints(ctx context.Context, tx pgx.Tx) (map[string]eventstore.Position, error) {
	rows, err := tx.Query(ctx, `SELECT name, transaction_id::text, position FROM projection_checkpoints`)
	if err != nil {
		return nil, err
	}
	out := map[string]eventstore.Position{}
	var name, txText string
	var pos int64
	_, err = pgx.ForEachRow(rows, []any{&name, &txText, &pos}, func() error {
		txid, err := strconv.ParseUint(txText, 10, 64)
		out[name] = eventstore.Position{TxID: txid, Pos: pos}
		return err
	})
	return out, err
}

// streamInfo is a stream in scope and its head as the snapshot shows it.
type streamInfo struct {
	head    eventstore.Head
	account string // the account of an account stream, else ""
}

func readStreams(ctx context.Context, tx pgx.Tx, accountID string) ([]streamInfo, error) {
	sql := `SELECT ` + eventstore.HeadColumns + ` FROM streams`
	var args []any
	if accountID != "" {
		sql += ` WHERE stream_id = $1`
		args = append(args, domain.AccountStream(accountID))
	}
	heads, err := eventstore.ScanHeads(tx.Query(ctx, sql+` ORDER BY stream_no`, args...))
	if err != nil {
		return nil, err
	}
	out := make([]streamInfo, 0, len(heads))
	for _, h := range heads {
		out = append(out, streamInfo{head: *h, account: domain.AccountOfStream(h.ID)})
	}
	slices.SortFunc(out, func(x, y streamInfo) int { return int(x.head.No - y.head.No) })
	return out, nil
}

// unit is one piece of work: whole streams (a run of small ones), or one segment of a long
// stream, between two positions.
type unit struct {
	streams  []streamInfo
	lo, hi   int32 // the stream numbers it reads, inclusive
	from, to int64 // positions, inclusive
	segment  *segment
}

type segment struct {
	stream streamInfo
	index  int // 0 for the first
	last   bool
}

// segmented collects the segments of a long stream, merging them in order as they come in.
type segmented struct {
	mu     sync.Mutex     // a part's merge, and the stream's finish
	parts  []*streamState // parts done and not merged yet
	merged *streamState   // parts[:next] merged
	next   int
}

// maxUnitStreams bounds the streams of one unit: a unit's states (and its account rows, read
// when it finishes) are in memory at once, so a store of many small streams (a hundred
// thousand accounts given a bonus) must not put them all in one unit.
const maxUnitStreams = 1000

// plan splits the streams into units of about SegmentEvents events and at most maxUnitStreams
// streams. A unit's streams are a sub-slice of streams, not a copy.
func (a *auditor) plan(ctx context.Context, tx pgx.Tx, streams []streamInfo) ([]unit, int64, error) {
	var units []unit
	var total int64
	// A whole-store audit's units read every stream number there is, those with no row in
	// streams too (see audit): each run of small streams reads from just above the stream
	// before it up to just below the next, and the numbers below the first stream and above
	// the last are read as well, by units of no stream when no run covers them.
	wholeStore := a.opts.AccountID == ""
	lo := int32(math.MinInt32)
	first, curEvents := 0, int64(0) // the current unit is streams[first:i]
	flush := func(i int, hi int32) {
		switch {
		case !wholeStore && i > first:
			units = append(units, unit{streams: streams[first:i:i], lo: streams[first].head.No, hi: streams[i-1].head.No,
				from: a.opts.FromPosition, to: a.opts.ToPosition})
		case wholeStore && lo <= hi:
			units = append(units, unit{streams: streams[first:i:i], lo: lo, hi: hi, from: a.opts.FromPosition, to: a.opts.ToPosition})
		}
		first, curEvents = i, 0
		if hi < math.MaxInt32 {
			lo = hi + 1
		}
	}
	for i, s := range streams {
		n := s.head.Version
		total += n
		if n <= a.opts.SegmentEvents {
			if curEvents+n > a.opts.SegmentEvents || i-first >= maxUnitStreams {
				flush(i, s.head.No-1)
			}
			curEvents += n
			continue
		}
		flush(i, s.head.No-1)
		bounds, err := segmentBounds(ctx, tx, s.head.No, a.opts.SegmentEvents)
		if err != nil {
			return nil, 0, err
		}
		from := a.opts.FromPosition
		var segs []unit
		for _, cut := range bounds {
			if cut <= from || cut > a.opts.ToPosition {
				continue
			}
			segs = append(segs, unit{streams: streams[i : i+1 : i+1], lo: s.head.No, hi: s.head.No, from: from, to: cut - 1})
			from = cut
		}
		segs = append(segs, unit{streams: streams[i : i+1 : i+1], lo: s.head.No, hi: s.head.No, from: from, to: a.opts.ToPosition})
		for j := range segs {
			segs[j].segment = &segment{stream: s, index: j, last: j == len(segs)-1}
		}
		a.segments[s.head.No] = &segmented{parts: make([]*streamState, len(segs))}
		units = append(units, segs...)
		first = i + 1
		lo = s.head.No + 1
	}
	flush(len(streams), math.MaxInt32)
	return units, total, nil
}

// segmentBounds returns positions that cut a stream into segments of about size events: the
// positions of some of its stream marks.
func segmentBounds(ctx context.Context, tx pgx.Tx, streamNo int32, size int64) ([]int64, error) {
	every := max(size/256, 1) * 256
	rows, err := tx.Query(ctx, `SELECT position FROM stream_marks WHERE stream_no = $1 AND version % $2 = 0 ORDER BY version`, streamNo, every)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// worker audits units in a transaction on the audit's snapshot.
func (a *auditor) worker(ctx context.Context, pool *pgxpool.Pool, work <-chan unit) error {
	return onSnapshot(ctx, pool, a.snapshot, func(tx pgx.Tx) error {
		for u := range work {
			if err := a.audit(ctx, tx, u); err != nil {
				return err
			}
		}
		return nil
	})
}

// exportSnapshot begins, on conn, the read-only transaction whose snapshot a check shares with
// its workers (onSnapshot) and returns it with the snapshot's name. Its first statement locks
// the archive gate: an archive under way is seen whole, and one that starts during the check
// waits for it to end (eventstore.ReadSnapshot); the workers need no lock of their own.
func exportSnapshot(ctx context.Context, conn *pgxpool.Conn) (pgx.Tx, string, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, "", err
	}
	var snapshot string
	if err = eventstore.LockForRead(ctx, tx); err == nil {
		err = tx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snapshot)
	}
	if err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, "", err
	}
	return tx, snapshot, nil
}

// onSnapshot runs fn in a read-only transaction of its own on the exported snapshot.
func onSnapshot(ctx context.Context, pool *pgxpool.Pool, snapshot string, fn func(pgx.Tx) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+snapshot+`'`); err != nil {
		return fmt.Errorf("audit: import snapshot: %w", err)
	}
	return fn(tx)
}

// audit checks one unit's events and, for whole streams, finishes them.
func (a *auditor) audit(ctx context.Context, tx pgx.Tx, u unit) error {
	states := make(map[int32]*streamState, len(u.streams))
	boundaries, err := eventstore.BoundariesBetween(ctx, tx, u.lo, u.hi)
	if err != nil {
		return err
	}
	var usage usageCounts
	if a.auditsUsage() {
		usage = usageCounts{}
	}
	for _, s := range u.streams {
		st := a.newState(s)
		st.usage = usage
		if u.segment != nil && u.segment.index > 0 {
			st.opening = &openingClaims{reading: true, from: u.from, to: u.to}
		}
		if b, ok := boundaries[s.head.ID]; ok {
			if err := st.startAtBoundary(b, u.segment == nil || u.segment.index == 0); err != nil {
				return err
			}
		}
		if u.from > 0 {
			if err := st.startAfter(ctx, tx, u.from, u.segment == nil || u.segment.index == 0); err != nil {
				return err
			}
		}
		states[s.head.No] = st
	}
	rows, err := tx.Query(ctx, `SELECT position, transaction_id::text, stream_no, version, type, payload::text, metadata::text, recorded_at, hash
		FROM events WHERE stream_no BETWEEN $1 AND $2 AND position BETWEEN $3 AND $4
		ORDER BY stream_no, position`, u.lo, u.hi, u.from, u.to)
	if err != nil {
		return err
	}
	var (
		e eventstore.Event
		// The variable-length columns are read in the driver's buffer, valid until the next
		// row, not copied: an event is checked and folded before the next is read.
		txText, typ, payload, meta, hash pgtype.DriverBytes
		no                               int32
		n                                int64
		types                            = map[string]string{} // the event type names, each allocated once
		lists                            []string              // an event's resource lists, reused (they alias payload)
		orphans                          = map[int32]bool{}    // numbers reported as belonging to no stream
	)
	// Rows are streamed: one is held at a time, whatever the number of events.
	_, err = pgx.ForEachRow(rows, []any{&e.Position, &txText, &no, &e.Version, &typ, &payload, &meta, &e.RecordedAt, &hash}, func() error {
		var ok bool
		if e.Type, ok = types[string(typ)]; !ok {
			e.Type = string(typ)
			types[e.Type] = e.Type
		}
		st := states[no]
		if st == nil {
			// In a whole-store audit the unit reads no other stream's numbers: this event
			// belongs to no stream, and nothing else would ever read it. (An account audit
			// reads its neighbours' events too, and skips them.)
			if a.opts.AccountID == "" && !orphans[no] {
				a.differ("stream number %d: inserted: events under a number with no row in streams (the first at position %d, %s v%d): they belong to no stream",
					no, e.Position, e.Type, e.Version)
				orphans[no] = true
			}
			return nil
		}
		txid, err := strconv.ParseUint(string(txText), 10, 64)
		if err != nil {
			return err
		}
		e.TxID, e.StreamID, e.Payload, e.RawMetadata = txid, st.info.head.ID, json.RawMessage(payload), []byte(meta)
		e.RecordedAt = e.RecordedAt.UTC()
		copy(e.Hash[:], hash)
		lists = lists[:0]
		st.add(e, &lists)
		if len(usage) >= usageMemoryRows {
			if err := a.usage.merge(ctx, a.pool, usage); err != nil {
				return err
			}
		}
		n++
		if n%1024 == 0 {
			a.events.Add(1024)
		}
		return nil
	})
	a.events.Add(n % 1024)
	if err != nil {
		return err
	}
	if len(usage) > 0 {
		if err := a.usage.merge(ctx, a.pool, usage); err != nil {
			return err
		}
	}
	if u.segment != nil {
		return a.segmentDone(ctx, tx, u.segment, states[u.segment.stream.head.No])
	}
	return a.finish(ctx, tx, u.streams, states)
}

// segmentDone files a segment's state and merges every part it can, in order: a part waits
// only for the parts before it, so the day claims a part holds (its opening day's and its last
// day's) are let go soon, not when the last part is in. The merge of the last part finishes the
// stream.
func (a *auditor) segmentDone(ctx context.Context, tx pgx.Tx, s *segment, st *streamState) error {
	st.endSegment()
	a.mu.Lock()
	seg := a.segments[s.stream.head.No]
	a.mu.Unlock()
	seg.mu.Lock()
	defer seg.mu.Unlock()
	seg.parts[s.index] = st
	for ; seg.next < len(seg.parts) && seg.parts[seg.next] != nil; seg.next++ {
		p := seg.parts[seg.next]
		seg.parts[seg.next] = nil
		if seg.merged == nil {
			seg.merged = p
			continue
		}
		if err := seg.merged.mergeClaims(ctx, tx, p); err != nil {
			return err
		}
		seg.merged.merge(p)
	}
	if seg.next < len(seg.parts) {
		return nil
	}
	return a.finish(ctx, tx, []streamInfo{s.stream}, map[int32]*streamState{s.stream.head.No: seg.merged})
}

// finish reports the differences found in whole streams and compares them with their heads,
// account rows and read models.
func (a *auditor) finish(ctx context.Context, tx pgx.Tx, streams []streamInfo, states map[int32]*streamState) error {
	var accountIDs []string
	for _, s := range streams {
		st := states[s.head.No]
		for _, d := range st.diffs {
			a.differ("%s", d)
		}
		if !a.whole {
			if s.account != "" {
				accountIDs = append(accountIDs, s.account)
			}
			continue
		}
		h := s.head
		// The head's position too: the ledger's CSV export and digests end a stream there.
		if st.version != h.Version || st.hash != h.Hash || (h.Version > 0 && (!st.at.Equal(h.At) || st.position != h.Position)) {
			a.differ("stream %s: head says version %d (hash %x, time %s, position %d) but its events end at version %d (hash %x, time %s, position %d)",
				h.ID, h.Version, h.Hash[:6], h.At.Format(time.RFC3339Nano), h.Position, st.version, st.hash[:6], st.at.Format(time.RFC3339Nano), st.position)
		}
		if s.account != "" {
			accountIDs = append(accountIDs, s.account)
		}
	}
	if len(accountIDs) == 0 {
		return nil
	}
	if !a.whole {
		// A range audit compares no rows with the facts, but a key issued before the range is
		// known to the key facts in it by its id and to its charges by its number: its
		// api_keys row joins the two, so that the charges are checked against those facts
		// (docs/operations.md, "kyapi audit").
		keys, err := loadKeyRows(ctx, tx, accountIDs)
		if err != nil {
			return err
		}
		for _, s := range streams {
			if s.account != "" {
				states[s.head.No].keys.check(s.account, keys[s.account], rowsNumbers, a.differ)
			}
		}
		return nil
	}
	rows, err := loadAccountRows(ctx, tx, accountIDs)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.accounts += len(accountIDs)
	a.mu.Unlock()
	for _, s := range streams {
		if s.account != "" {
			a.compareAccount(states[s.head.No], rows[s.account])
		}
	}
	return nil
}

// orphans reports read-model rows of accounts that do not exist, and account rows that are not
// on their account's stream.
func (a *auditor) orphans(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT account_id FROM rm_balances EXCEPT SELECT account_id FROM accounts
		UNION SELECT account_id FROM rm_account_days EXCEPT SELECT account_id FROM accounts ORDER BY 1`)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, id := range ids {
		a.differ("account %s: in the read models but not in the write model", id)
	}
	// An account row is audited through its stream (compareAccount): a row on any other
	// stream has no ledger behind it, whatever its balance says.
	type unbacked struct {
		ID     string
		Stream *string
	}
	rows, err = tx.Query(ctx, `SELECT a.account_id, s.stream_id FROM accounts a LEFT JOIN streams s USING (stream_no)
		WHERE s.stream_id IS DISTINCT FROM $1 || a.account_id ORDER BY 1`, domain.AccountStream(""))
	if err != nil {
		return err
	}
	bad, err := pgx.CollectRows(rows, pgx.RowToStructByPos[unbacked])
	for _, u := range bad {
		stream := "no stream"
		if u.Stream != nil {
			stream = "stream " + *u.Stream
		}
		a.differ("account %s: its row (balance and totals) is on %s, not on its ledger %s", u.ID, stream, domain.AccountStream(u.ID))
	}
	return err
}
