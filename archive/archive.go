// Package archive moves old history out of the event store and back: Archive writes the
// event partitions wholly below a position to a file, with every touched stream's state at
// the boundary (chain hash and the last event it is computed from, version, an account's
// balance, totals, daily sums and archived payments and bonuses), and drops them; Restore
// checks such a file and attaches its range again. Archived history is always a prefix of the
// store. docs/operations.md ("Retention and archiving") is the operator's guide.
package archive

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/durable"
)

// ErrRefused is wrapped by every refusal: nothing was changed, and the error says why.
var ErrRefused = errors.New("refused")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// Options say what to archive.
type Options struct {
	// Before: every partition whose positions all lie below it is archived (with those already
	// archived, the archived history then ends at the highest such partition's end).
	Before int64
	// File is the archive file to create; it must not exist.
	File string
	// Now decides which events the meter may still read dedup claims from: every event of the
	// range must be recorded before yesterday (UTC).
	Now time.Time
	// Projections are the projections whose checkpoints must have passed the range (every
	// projection in projection_checkpoints must have too).
	Projections []string
	// LockWait bounds the wait for the events table (default 10 s).
	LockWait time.Duration

	// commitAnswer, for the tests, stands in for the answer to the drop's COMMIT once it was
	// sent: a connection cut after the server committed answers an error.
	commitAnswer func(error) error
}

// Result describes an archived or restored range.
type Result struct {
	From, To   int64 // positions From up to, not including, To
	Events     int64
	Streams    int64
	Partitions []string
	SHA256     [32]byte
}

// Plan is what Archive would archive: the partitions and the range they cover.
func plan(ctx context.Context, q eventstore.Querier, before int64) ([]eventstore.Partition, error) {
	parts, err := eventstore.Partitions(ctx, q)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, refuse("the events table has no partitions")
	}
	next, err := eventstore.NextPosition(ctx, q)
	if err != nil {
		return nil, err
	}
	// The newest partition is the one the next append writes to (or the last one, when the
	// position sequence has run past every partition).
	newest := parts[len(parts)-1]
	for _, p := range parts {
		if p.From <= next && next < p.To {
			newest = p
			break
		}
	}
	var chosen []eventstore.Partition
	for _, p := range parts {
		if p.To <= before {
			chosen = append(chosen, p)
		}
	}
	if len(chosen) == 0 {
		return nil, refuse("no partition lies wholly below position %d: the oldest one in the store covers positions %d to %d",
			before, parts[0].From, parts[0].To-1)
	}
	if last := chosen[len(chosen)-1]; last.To > newest.From {
		return nil, refuse("positions up to %d include the newest partition %s (positions %d to %d, where appends go): archive below position %d at most",
			last.To-1, newest.Name, newest.From, newest.To-1, newest.From)
	}
	return chosen, nil
}

// checkReaders refuses a range that a projection has not passed, or whose charges the meter
// may still read as dedup claims (today's and yesterday's: a clock behind midnight charges on
// yesterday).
func checkReaders(ctx context.Context, q eventstore.Querier, sum eventstore.RangeSummary, opts Options) error {
	if sum.Last == nil {
		return nil
	}
	rows, err := q.Query(ctx, `SELECT name, transaction_id::text, position FROM projection_checkpoints ORDER BY name`)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var behind []string
	var name, txText string
	var pos int64
	_, err = pgx.ForEachRow(rows, []any{&name, &txText, &pos}, func() error {
		tx, err := strconv.ParseUint(txText, 10, 64)
		seen[name] = true
		if (eventstore.Position{TxID: tx, Pos: pos}).Less(*sum.Last) {
			behind = append(behind, name)
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, p := range opts.Projections {
		if !seen[p] {
			behind = append(behind, p+" (never run)")
		}
	}
	if len(behind) > 0 {
		return refuse("projections have not passed the range (its newest event is at %v): %s; let them catch up (kyapi serve, or kyapi audit) and try again",
			*sum.Last, strings.Join(behind, ", "))
	}
	keptFrom := time.Date(opts.Now.UTC().Year(), opts.Now.UTC().Month(), opts.Now.UTC().Day()-1, 0, 0, 0, 0, time.UTC)
	if !sum.NewestAt.Before(keptFrom) {
		return refuse("the range holds events of %s, and the dedup claims of today and yesterday (UTC) are read from their events: archive it from %s on",
			sum.NewestAt.Format(time.DateOnly), sum.NewestAt.UTC().Truncate(24*time.Hour).AddDate(0, 0, 2).Format(time.RFC3339))
	}
	return nil
}

// Archive writes the partitions wholly below opts.Before (and above the history archived
// already) to opts.File, then drops them, recording each touched stream's state at the new
// boundary. It refuses — with ErrRefused, having changed nothing and left no file — a range
// that a projection has not passed, that holds the newest partition or events the dedup
// claims still refer to, or whose chains or balances do not add up.
func Archive(ctx context.Context, pool *pgxpool.Pool, opts Options) (res Result, err error) {
	if opts.LockWait <= 0 {
		opts.LockWait = 10 * time.Second
	}
	parts, err := plan(ctx, pool, opts.Before)
	if err != nil {
		return res, err
	}
	res.From, res.To = parts[0].From, parts[len(parts)-1].To
	for _, p := range parts {
		res.Partitions = append(res.Partitions, p.Name)
	}
	sum, err := eventstore.SummarizeRange(ctx, pool, res.From, res.To)
	if err != nil {
		return res, err
	}
	if err := checkReaders(ctx, pool, sum, opts); err != nil {
		return res, err
	}

	f, err := os.OpenFile(opts.File, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return res, refuse("%v (an archive file is never overwritten)", err)
	}
	committed := false
	defer func() {
		if !committed {
			f.Close()
			os.Remove(opts.File)
		}
	}()
	w := newWriter(f)
	h := header{Format: formatName, FormatVersion: formatVersion, FromPosition: res.From, ToPosition: res.To, CreatedAt: opts.Now.UTC()}
	for _, p := range parts {
		h.Partitions = append(h.Partitions, partitionJSON{Name: p.Name, From: p.From, To: p.To})
	}
	if err := w.write(line{Header: &h}); err != nil {
		return res, err
	}
	var ends []eventstore.Boundary
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// The boundaries the range starts from, read first: the connection is busy during the scan.
		starts, err := eventstore.BoundariesInRange(ctx, tx, res.From, res.To)
		if err != nil {
			return err
		}
		var cur *folding
		closeStream := func() error {
			if cur == nil {
				return nil
			}
			end, sj, err := cur.end()
			if err != nil {
				return err
			}
			ends = append(ends, end)
			return w.write(line{Stream: sj})
		}
		err = eventstore.ScanRange(ctx, tx, res.From, res.To, func(e eventstore.Event) error {
			if cur == nil || cur.id != e.StreamID {
				if err := closeStream(); err != nil {
					return err
				}
				start, ok := starts[e.StreamID]
				var err error
				if cur, err = startFolding(e.StreamID, start, ok); err != nil {
					return err
				}
			}
			if err := cur.add(e); err != nil {
				return refuse("%v; run kyapi audit", err)
			}
			res.Events++
			ej := toEventJSON(e)
			return w.write(line{Event: &ej})
		})
		if err != nil {
			return err
		}
		return closeStream()
	})
	if err != nil {
		return res, err
	}
	if res.Events != sum.Events {
		return res, fmt.Errorf("archive: read %d events of positions %d to %d, counted %d", res.Events, res.From, res.To-1, sum.Events)
	}
	res.Streams = int64(len(ends))
	sj := summaryJSON{Events: res.Events, Streams: res.Streams}
	if sum.Last != nil {
		sj.LastTx, sj.LastPosition = strconv.FormatUint(sum.Last.TxID, 10), &sum.Last.Pos
	}
	if err := w.write(line{Summary: &sj}); err != nil {
		return res, err
	}
	if res.SHA256, err = w.close(); err != nil {
		return res, err
	}
	if err := f.Sync(); err != nil {
		return res, err
	}
	if err := f.Close(); err != nil {
		return res, err
	}
	// The file's name too: a new file's directory entry is durable only once its directory
	// is synced, and the range it holds is about to leave the store.
	if err := durable.SyncDir(filepath.Dir(opts.File)); err != nil {
		return res, fmt.Errorf("archive: sync the directory of %s: %w", opts.File, err)
	}

	// The file is safe on disk: drop the range, if nothing changed meanwhile.
	abs, _ := filepath.Abs(opts.File)
	err = commitWork(ctx, pool, opts, func(tx pgx.Tx) error {
		if err := eventstore.LockForArchive(ctx, tx, opts.LockWait); err != nil {
			return fmt.Errorf("archive: lock the events table: %w (try again when it is less busy)", err)
		}
		again, err := plan(ctx, tx, opts.Before)
		if err != nil {
			return err
		}
		if len(again) != len(parts) || again[0] != parts[0] || again[len(again)-1] != parts[len(parts)-1] {
			return refuse("the partitions changed while the archive was written; try again")
		}
		now, err := eventstore.SummarizeRange(ctx, tx, res.From, res.To)
		if err != nil {
			return err
		}
		if now.Events != sum.Events || (now.Last == nil) != (sum.Last == nil) || (now.Last != nil && *now.Last != *sum.Last) {
			return refuse("events were added to the range while the archive was written (%d then %d); try again", sum.Events, now.Events)
		}
		if err := checkReaders(ctx, tx, now, opts); err != nil {
			return err
		}
		return eventstore.DetachArchived(ctx, tx, eventstore.Archive{From: res.From, To: res.To, Events: res.Events,
			Last: sum.Last, SHA256: res.SHA256, FileName: abs}, parts, ends)
	})
	var sent *commitSent
	if errors.As(err, &sent) {
		// The COMMIT was sent and its answer is an error: the server may have committed (a
		// connection cut after it did; a cancel during a synchronous standby's wait). The file
		// is then the only copy of the range, so it goes only if the store says the drop did not
		// happen.
		switch recorded, cerr := archiveRecorded(pool, res.From, res.SHA256); {
		case cerr != nil:
			committed = true // keep the file
			return res, fmt.Errorf("archive: the outcome of the drop is unknown (%v, then %v): %s was kept; "+
				"if kyapi archive -list shows the range from %d archived, the file is its archive, else delete it", sent.err, cerr, opts.File, res.From)
		case recorded:
			err = nil
		default:
			err = sent.err
		}
	}
	if err != nil {
		return res, err
	}
	committed = true
	return res, nil
}

// commitSent is the error of a COMMIT that was sent: the server may have committed.
type commitSent struct{ err error }

func (e *commitSent) Error() string { return e.err.Error() }
func (e *commitSent) Unwrap() error { return e.err }

// commitWork runs work in a transaction and commits it. A failure of the COMMIT itself is a
// *commitSent: whether the server committed is not known from it.
func commitWork(ctx context.Context, pool *pgxpool.Pool, opts Options, work func(pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := work(tx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	err = tx.Commit(ctx)
	if opts.commitAnswer != nil {
		err = opts.commitAnswer(err)
	}
	if err != nil {
		return &commitSent{err}
	}
	return nil
}

// archiveRecorded tells whether the store records the archive of the range from from with the
// file's checksum, whatever became of the caller's context. It reads once the drop's
// transaction has ended (ReadSnapshot waits for the archive gate that transaction holds): a
// commit still waiting for a synchronous standby is committed locally, yet not visible until
// then. Past 15 s it answers an error.
func archiveRecorded(pool *pgxpool.Pool, from int64, sum [32]byte) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var recorded bool
	err := eventstore.ReadSnapshot(ctx, pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_archives WHERE from_position = $1 AND sha256 = $2)`,
			from, sum[:]).Scan(&recorded)
	})
	return recorded, err
}

// folding is one stream being read from the store or from a file: its chain and, for an
// account, its folded state.
type folding struct {
	id      string
	start   *eventstore.Boundary
	events  int64
	version int64
	hash    [32]byte
	at      time.Time
	firstAt time.Time
	pos     int64
	account *AccountState
	last    eventstore.BoundaryEvent // the content of the newest event folded in, as hashed
	hasLast bool
}

func startFolding(id string, start eventstore.Boundary, ok bool) (*folding, error) {
	f := &folding{id: id}
	if domain.AccountOfStream(id) != "" {
		f.account = newAccountState()
	}
	if !ok {
		return f, nil
	}
	f.start = &start
	f.version, f.hash, f.at, f.firstAt, f.pos = start.Version, start.Hash, start.At, start.FirstAt, start.Position
	var s AccountState
	if f.account != nil {
		var err error
		if s, err = DecodeAccountState(start.Account); err != nil {
			return nil, fmt.Errorf("stream %s: boundary state: %w", id, err)
		}
		if s.Claims == nil {
			s.claimsUnknown = domain.Day(start.At) // a state recorded before claims were: that day's are not known
		}
		f.account = &s
	}
	// A boundary that its own last event does not vouch for is not folded on from.
	if _, err := CheckBoundary(start, s); err != nil {
		return nil, refuse("%v; run kyapi audit", err)
	}
	if start.Last != nil {
		f.last, f.hasLast = *start.Last, true
	}
	return f, nil
}

// add checks e against the chain and the balance so far and folds it in.
func (f *folding) add(e eventstore.Event) error {
	if e.Version != f.version+1 {
		return fmt.Errorf("stream %s: version %d follows version %d (position %d)", f.id, e.Version, f.version, e.Position)
	}
	if !eventstore.Verify(f.hash, e) {
		return fmt.Errorf("stream %s v%d (position %d): its content does not match its hash chained to v%d", f.id, e.Version, e.Position, f.version)
	}
	if e.RecordedAt.Before(f.at) {
		return fmt.Errorf("stream %s v%d (position %d): recorded before the event it follows", f.id, e.Version, e.Position)
	}
	if f.version == 0 {
		f.firstAt = e.RecordedAt
	}
	if f.account != nil {
		fact, err := domain.DecodeAccountFact(e.Type, e.Payload)
		if err != nil {
			return fmt.Errorf("stream %s v%d (position %d): %w", f.id, e.Version, e.Position, err)
		}
		if f.account.Balance+fact.CreditsDelta != fact.BalanceAfter {
			return fmt.Errorf("stream %s v%d (position %d): balance_after %d, but the balance before it was %d and it moved %+d",
				f.id, e.Version, e.Position, fact.BalanceAfter, f.account.Balance, fact.CreditsDelta)
		}
		if err := fact.CheckDelta(); err != nil {
			return fmt.Errorf("stream %s v%d (position %d): %w", f.id, e.Version, e.Position, err)
		}
		if err := f.account.add(e.Version, e.RecordedAt, fact, e.Payload); err != nil {
			return fmt.Errorf("stream %s v%d (position %d): %w", f.id, e.Version, e.Position, err)
		}
	}
	f.last, f.hasLast = eventstore.BoundaryEvent{PrevHash: f.hash, Type: e.Type, Payload: e.Payload, Metadata: e.RawMetadata}, true
	f.version, f.hash, f.at, f.pos = e.Version, e.Hash, e.RecordedAt, e.Position
	f.events++
	return nil
}

// end is the stream's boundary after its events, and the line that closes them in a file.
func (f *folding) end() (eventstore.Boundary, *streamJSON, error) {
	b := eventstore.Boundary{StreamID: f.id, Version: f.version, Position: f.pos, Hash: f.hash, At: f.at, FirstAt: f.firstAt}
	if f.hasLast {
		last := f.last
		b.Last = &last
	}
	sj := &streamJSON{StreamID: f.id, Events: f.events}
	var err error
	if f.account != nil {
		f.account.settle()
		if b.Account, err = json.Marshal(f.account); err != nil {
			return b, nil, err
		}
	}
	if sj.End, err = toBoundaryJSON(b); err != nil {
		return b, nil, err
	}
	if f.start != nil {
		if sj.Start, err = toBoundaryJSON(*f.start); err != nil {
			return b, nil, err
		}
	}
	return b, sj, nil
}

func hexDigest(d [32]byte) string { return hex.EncodeToString(d[:]) }
