package audit

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// marksListed bounds the stream_marks rows a report names; past it, a count.
const marksListed = 100

// checkMarks holds every stream mark (stream_marks: every 256th event's position and time) to
// the event it marks: an event of the stream at that position, of that version, recorded at
// that time. Nothing hashes the marks, and balance-at and the statements' opening and closing
// balances bound their search by them (eventstore.LastAt): a mark whose time or position was
// edited, or one added, would have them answer another instant's balance. A missing mark only
// makes that search longer. streamNo 0 checks every stream's marks.
//
// Each mark is one index lookup of its event (LATERAL, LIMIT 1), so the check costs a lookup
// per 256 events rather than a pass over the events.
func (a *auditor) checkMarks(ctx context.Context, tx pgx.Tx, streamNo int32) error {
	rows, err := tx.Query(ctx, `
		SELECT s.stream_id, m.version, m.position, m.recorded_at, e.version, e.recorded_at
		FROM stream_marks m JOIN streams s ON s.stream_no = m.stream_no
		LEFT JOIN LATERAL (SELECT e.version, e.recorded_at FROM events e
			WHERE e.stream_no = m.stream_no AND e.position = m.position LIMIT 1) e ON true
		WHERE ($1 = 0 OR m.stream_no = $1)
		  AND (e.version IS DISTINCT FROM m.version OR e.recorded_at IS DISTINCT FROM m.recorded_at)
		ORDER BY s.stream_id, m.version`, streamNo)
	if err != nil {
		return err
	}
	var (
		stream            string
		version, position int64
		at                time.Time
		eVersion          *int64
		eAt               *time.Time
		n                 int
	)
	_, err = pgx.ForEachRow(rows, []any{&stream, &version, &position, &at, &eVersion, &eAt}, func() error {
		n++
		if n > marksListed {
			return nil
		}
		mark := "stream " + stream + ": stream mark of v%d (position %d, recorded_at %s): "
		args := []any{version, position, at.UTC().Format(time.RFC3339Nano)}
		if eVersion == nil {
			a.differ(mark+"the stream has no event at that position; balance-at and statements search by it", args...)
		} else {
			a.differ(mark+"the event there is v%d, recorded_at %s; balance-at and statements search by it",
				append(args, *eVersion, eAt.UTC().Format(time.RFC3339Nano))...)
		}
		return nil
	})
	if n > marksListed {
		a.differ("stream marks: %d more that do not match their events", n-marksListed)
	}
	return err
}
