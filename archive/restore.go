package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/eventstore"
)

// index is what a first pass over an archive file learns: its header, the state before and
// after every stream's events, its summary and whether its digest matches its content.
type index struct {
	header  header
	streams map[string]*streamJSON
	order   []string
	summary summaryJSON
	digest  [32]byte
}

func readIndex(path string) (*index, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := newReader(f)
	if err != nil {
		return nil, err
	}
	ix := &index{streams: map[string]*streamJSON{}}
	var events int64
	sawSummary := false
	for {
		l, ok, err := r.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		switch {
		case r.n == 1:
			if l.Header == nil || l.Header.Format != formatName {
				return nil, fmt.Errorf("%w: its first line is not a %s header", errFormat, formatName)
			}
			if l.Header.FormatVersion != formatVersion {
				return nil, fmt.Errorf("%w: format version %d; this kyapi reads version %d", errFormat, l.Header.FormatVersion, formatVersion)
			}
			ix.header = *l.Header
		case l.Event != nil:
			events++
		case l.Stream != nil:
			if l.Stream.End == nil || ix.streams[l.Stream.StreamID] != nil {
				return nil, fmt.Errorf("%w: line %d: stream %s closed twice or without its end state", errFormat, r.n, l.Stream.StreamID)
			}
			ix.streams[l.Stream.StreamID] = l.Stream
			ix.order = append(ix.order, l.Stream.StreamID)
		case l.Summary != nil:
			ix.summary, sawSummary = *l.Summary, true
		default:
			return nil, fmt.Errorf("%w: line %d is none of header, event, stream, summary", errFormat, r.n)
		}
	}
	ix.digest, err = decodeHash(r.digest)
	if err != nil {
		return nil, fmt.Errorf("%w: sha256 line: %v", errFormat, err)
	}
	var got [32]byte
	r.sum.Sum(got[:0])
	switch {
	case got != ix.digest:
		return nil, refuse("the file's content does not match its own digest (sha256 %s, its sha256 line says %s): it has been altered or damaged",
			hexDigest(got), hexDigest(ix.digest))
	case !sawSummary || ix.summary.Events != events || ix.summary.Streams != int64(len(ix.streams)):
		return nil, fmt.Errorf("%w: its summary does not count its %d events and %d streams", errFormat, events, len(ix.streams))
	}
	return ix, nil
}

// Restore checks an archive file against its own digest, against the archive the database
// recorded when it was written (the same SHA-256), and event by event against every stream's
// chain and the states before and after, then loads its range back as a partition of the
// events table, in one transaction. The streams' boundaries go back to where they were before
// the range. Only the newest archive can be restored (archived history stays a prefix); a
// file restored already, altered, or from another database is refused with ErrRefused, and
// nothing is changed.
func Restore(ctx context.Context, pool *pgxpool.Pool, path string) (res Result, err error) {
	ix, err := readIndex(path)
	if err != nil {
		return res, err
	}
	h := ix.header
	res.From, res.To, res.SHA256, res.Streams = h.FromPosition, h.ToPosition, ix.digest, int64(len(ix.streams))
	for _, p := range h.Partitions {
		res.Partitions = append(res.Partitions, p.Name)
	}
	// The one transaction of the restore; its COMMIT's answer may be lost after the server
	// committed (below).
	err = commitWork(ctx, pool, Options{}, func(tx pgx.Tx) error {
		// Concurrent restores and archives serialize on the archive rows.
		if _, err := tx.Exec(ctx, `LOCK TABLE event_archives IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		archives, err := eventstore.Archives(ctx, tx)
		if err != nil {
			return err
		}
		var rec *eventstore.Archive
		for i := range archives {
			if archives[i].From == h.FromPosition && archives[i].To == h.ToPosition {
				rec = &archives[i]
			}
		}
		if rec == nil {
			return refuse("positions %d to %d are not archived in this database: the file was restored already, or it comes from another database",
				h.FromPosition, h.ToPosition-1)
		}
		if newest := archives[len(archives)-1]; newest.From != rec.From {
			return refuse("restore the newer archive of positions %d to %d (%s) first: archived history must stay the oldest part of the store",
				newest.From, newest.To-1, newest.FileName)
		}
		if rec.SHA256 != ix.digest {
			return refuse("the file is not the archive of positions %d to %d that kyapi archive recorded (its sha256 is %s, the recorded one %s)",
				h.FromPosition, h.ToPosition-1, hexDigest(ix.digest), hexDigest(rec.SHA256))
		}
		var restart []eventstore.Boundary
		var cleared []string
		for _, id := range ix.order {
			s := ix.streams[id]
			if s.Start == nil {
				cleared = append(cleared, id)
				continue
			}
			b, err := s.Start.boundary(id)
			if err != nil {
				return fmt.Errorf("%w: stream %s: %v", errFormat, id, err)
			}
			restart = append(restart, b)
		}
		// The boundaries archive wrote, read before the load: the connection is busy while it runs.
		current, err := eventstore.BoundariesOf(ctx, tx, ix.order)
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		r, err := newReader(f)
		if err != nil {
			return err
		}
		next := loader(r, ix, current)
		n, err := eventstore.RestoreArchived(ctx, tx, *rec, next, restart, cleared)
		if err != nil {
			return err
		}
		if n != rec.Events {
			return refuse("the file holds %d events, the archive recorded %d", n, rec.Events)
		}
		res.Events = n
		return nil
	})
	var sent *commitSent
	if errors.As(err, &sent) {
		// The COMMIT was sent and its answer is an error: the server may have restored the
		// range. The store says whether its archive is gone.
		switch gone, cerr := archiveGone(pool, h.FromPosition, ix.digest); {
		case cerr != nil:
			return res, fmt.Errorf("%w (%v, then %v): kyapi archive -list shows whether positions %d to %d are still archived",
				ErrOutcomeUnknown, sent.err, cerr, h.FromPosition, h.ToPosition-1)
		case gone:
			err = nil
		default:
			err = sent.err
		}
	}
	return res, err
}

// ErrOutcomeUnknown is wrapped by a restore whose COMMIT was sent, whose answer was lost, and
// whose outcome the store could not tell: its range may have been restored.
var ErrOutcomeUnknown = errors.New("the outcome of the restore is unknown")

// archiveGone tells whether the store no longer records the archive of the range from from with
// the file's checksum, as a committed restore leaves it, whatever became of the caller's
// context. It reads once the restore's transaction has ended (it takes the lock that
// transaction held on event_archives). Past 15 s it answers an error.
func archiveGone(pool *pgxpool.Pool, from int64, sum [32]byte) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var gone bool
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE event_archives IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM event_archives WHERE from_position = $1 AND sha256 = $2)`,
			from, sum[:]).Scan(&gone)
	})
	return gone, err
}

// loader returns the events of the file one by one, checking each against its stream's chain
// and balance from the state the file says it starts at, each stream's end against the file's
// end state and the database's boundary, and the content against the digest once read whole.
func loader(r *reader, ix *index, current map[string]eventstore.Boundary) func() (eventstore.Event, bool, error) {
	var cur *folding
	return func() (eventstore.Event, bool, error) {
		for {
			l, ok, err := r.next()
			if err != nil {
				return eventstore.Event{}, false, err
			}
			if !ok {
				var got [32]byte
				r.sum.Sum(got[:0])
				if got != ix.digest {
					return eventstore.Event{}, false, refuse("the file changed while it was being restored")
				}
				return eventstore.Event{}, false, nil
			}
			switch {
			case l.Event != nil:
				e, err := l.Event.event()
				if err != nil {
					return e, false, fmt.Errorf("%w: %v", errFormat, err)
				}
				if e.Position < ix.header.FromPosition || e.Position >= ix.header.ToPosition {
					return e, false, fmt.Errorf("%w: event at position %d outside the file's range", errFormat, e.Position)
				}
				if cur == nil || cur.id != e.StreamID {
					s := ix.streams[e.StreamID]
					if s == nil {
						return e, false, fmt.Errorf("%w: stream %s has no closing line", errFormat, e.StreamID)
					}
					var start eventstore.Boundary
					if s.Start != nil {
						if start, err = s.Start.boundary(e.StreamID); err != nil {
							return e, false, fmt.Errorf("%w: %v", errFormat, err)
						}
					}
					if cur, err = startFolding(e.StreamID, start, s.Start != nil); err != nil {
						return e, false, err
					}
				}
				if err := cur.add(e); err != nil {
					return e, false, refuse("%v", err)
				}
				return e, true, nil
			case l.Stream != nil:
				if err := checkEnd(cur, l.Stream, current); err != nil {
					return eventstore.Event{}, false, err
				}
				cur = nil
			}
		}
	}
}

// checkEnd compares a stream's fold over the file with the file's end state and the
// database's boundary of the stream (which archive wrote from the same fold).
func checkEnd(cur *folding, s *streamJSON, current map[string]eventstore.Boundary) error {
	if cur == nil || cur.id != s.StreamID {
		return fmt.Errorf("%w: stream %s closed without its events", errFormat, s.StreamID)
	}
	folded, _, err := cur.end()
	if err != nil {
		return err
	}
	stated, err := s.End.boundary(s.StreamID)
	if err != nil {
		return fmt.Errorf("%w: %v", errFormat, err)
	}
	// A file written before states recorded their payments and bonuses states none; the fold
	// is compared with it, and with the database's boundary archive wrote from it, without
	// them. A file that states them is compared with them, so a boundary whose lists were
	// edited or dropped in the database is refused (docs/operations.md, "Retention and
	// archiving").
	if s.End.Account != nil {
		if folded.Account, err = withoutOnceLists(folded.Account, *s.End.Account); err != nil {
			return err
		}
	}
	if err := sameEnd(folded, stated, "the file says"); err != nil {
		return err
	}
	db, ok := current[s.StreamID]
	if !ok {
		return refuse("stream %s: the database has no archived boundary for it", s.StreamID)
	}
	return sameEnd(folded, db, "the database's boundary is")
}

// sameEnd refuses a recorded end state that is not the fold's. One recorded without its last
// event's content (archived before migration 0020) is compared without it.
func sameEnd(folded, recorded eventstore.Boundary, says string) error {
	if recorded.Last == nil {
		folded.Last = nil
	}
	f, err := canonical(folded)
	if err != nil {
		return err
	}
	if c, err := canonical(recorded); err != nil || !bytes.Equal(c, f) {
		return errors.Join(err, refuse("stream %s: its events fold to %s, %s %s", folded.StreamID, f, says, c))
	}
	return nil
}

// canonical is a boundary's JSON with its account state decoded and encoded again, so that two
// boundaries compare equal whatever the key order of their stored JSON.
func canonical(b eventstore.Boundary) ([]byte, error) {
	j, err := toBoundaryJSON(b)
	if err != nil {
		return nil, err
	}
	j.RecordedAt, j.FirstAt = j.RecordedAt.UTC(), j.FirstAt.UTC()
	return json.Marshal(j)
}
