package audit

import (
	"cmp"
	"context"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/domain"
)

// usageProjection keeps the usage ledger's read model, rm_usage_daily: metered requests per
// place and UTC day (detail, menu, reviews, related; charged or deduplicated), the input of
// trending. It is summed over every account, so the audit counts it apart from the streams'
// states: each unit counts its events up to the projection's checkpoint, and the counts are
// compared with the table once every unit is done (compareUsage).
const usageProjection = "usage"

// usageKey is a UTC day (days since 1970-01-01) and a place.
type usageKey struct {
	day   int32
	place string
}

// usageCounts are metered requests per UTC day and place, as the events say. A count is held
// by pointer so that counting one more never assigns to the map: an assignment would store
// the key it is given, whose place aliases the event being read (see add).
type usageCounts map[usageKey]*int64

func (c usageCounts) add(at time.Time, f domain.AccountFact) {
	if !f.Metered() || !f.Operation.UsageCounted() {
		return
	}
	day := int32(at.Unix() / 86400) // recorded_at is never before 1970
	for _, list := range [][]string{f.Paid, f.Deduplicated} {
		for _, r := range list {
			id := domain.PlaceOfResource(r)
			if id == "" {
				continue
			}
			k := usageKey{day, id}
			if n := c[k]; n != nil {
				*n++
				continue
			}
			k.place = strings.Clone(id) // the resource string aliases the event's payload
			n := new(int64)
			*n = 1
			c[k] = n
		}
	}
}

func usageDay(day int32) string { return domain.Day(time.Unix(int64(day)*86400, 0)) }

// usageMemoryRows bounds the (day, place) counts the audit holds at once: in the tally and in
// each unit's counts, which go to the tally whenever they reach it. Past it the tally goes to a
// temporary table (a count is about 100 bytes in memory, and a map's garbage as much again). A
// variable for the tests.
var usageMemoryRows = 20_000

// usageDiffs bounds the usage differences listed one by one; the rest are counted.
const usageDiffs = 100

// usageTally gathers the units' counts: in memory up to usageMemoryRows, then in the temporary
// table audit_usage on a connection of its own (the audit's transactions are read-only), so
// that the audit's memory does not grow with the history.
type usageTally struct {
	mu     sync.Mutex
	counts usageCounts
	spill  *pgx.Conn // holds audit_usage once the counts outgrew memory
}

// merge adds a unit's counts, and empties them.
func (t *usageTally) merge(ctx context.Context, pool *pgxpool.Pool, c usageCounts) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = usageCounts{}
	}
	for k, n := range c {
		if m := t.counts[k]; m != nil {
			*m += *n
		} else {
			t.counts[k] = n
		}
	}
	clear(c)
	if len(t.counts) < usageMemoryRows {
		return nil
	}
	return t.flush(ctx, pool)
}

// flush moves the counts held to audit_usage, copied (streamed, not built into one statement);
// a (day, place) may be there several times, summed once at the end (compareUsage).
func (t *usageTally) flush(ctx context.Context, pool *pgxpool.Pool) error {
	if t.spill == nil {
		// A connection of its own, not the pool's: the workers may hold every pooled one.
		c, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		if err != nil {
			return err
		}
		if _, err := c.Exec(ctx, `CREATE TEMP TABLE audit_usage (day text, place_id text, requests bigint)`); err != nil {
			_ = c.Close(ctx)
			return err
		}
		t.spill = c
	}
	next, stop := iter.Pull2(maps.All(t.counts))
	var row [3]any
	_, err := t.spill.CopyFrom(ctx, pgx.Identifier{"audit_usage"}, []string{"day", "place_id", "requests"},
		pgx.CopyFromFunc(func() ([]any, error) {
			k, n, ok := next()
			if !ok {
				return nil, nil
			}
			row[0], row[1], row[2] = usageDay(k.day), k.place, *n
			return row[:], nil
		}))
	stop()
	clear(t.counts)
	return err
}

// close ends the connection holding audit_usage, and the table with it.
func (t *usageTally) close() {
	if t.spill != nil {
		_ = t.spill.Close(context.Background())
		t.spill = nil
	}
}

// usageRow is a (day, place) count; ok false once its side has no more.
type usageRow struct {
	day, place string
	n          int64
	ok         bool
}

// usageRows reads (day, place, requests) rows one at a time.
func usageRows(rows pgx.Rows) func() (usageRow, error) {
	return func() (usageRow, error) {
		var r usageRow
		if !rows.Next() {
			return r, rows.Err()
		}
		r.ok = true
		return r, rows.Scan(&r.day, &r.place, &r.n)
	}
}

func (r usageRow) before(o usageRow) bool {
	return r.ok && (!o.ok || r.day < o.day || r.day == o.day && r.place < o.place)
}

// compareUsage compares the counts with rm_usage_daily as the snapshot shows it: both are read
// in (day, place) order, bytewise, and walked side by side. Days the archive may hold part of
// are not compared: up to the day of the newest archived event.
func (a *auditor) compareUsage(ctx context.Context, tx pgx.Tx, archived bool) error {
	t := &a.usage
	from := ""
	if archived {
		// The newest archived event: a stream's boundary is its last archived one. Times do
		// not follow positions across streams, so the oldest event kept says nothing.
		var newest *time.Time
		if err := tx.QueryRow(ctx, `SELECT max(recorded_at) FROM stream_boundaries`).Scan(&newest); err != nil {
			return err
		}
		if newest != nil {
			from = domain.Day(newest.AddDate(0, 0, 1))
		}
	}
	ledger := func() (usageRow, error) { return usageRow{}, nil }
	if t.spill != nil {
		if err := t.flush(ctx, nil); err != nil {
			return err
		}
		rows, err := t.spill.Query(ctx, `SELECT day, place_id, sum(requests)::bigint FROM audit_usage WHERE day >= $1
			GROUP BY 1, 2 ORDER BY day COLLATE "C", place_id COLLATE "C"`, from)
		if err != nil {
			return err
		}
		defer rows.Close()
		ledger = usageRows(rows)
	} else {
		keys := slices.SortedFunc(maps.Keys(t.counts), func(x, y usageKey) int {
			if c := cmp.Compare(x.day, y.day); c != 0 {
				return c
			}
			return strings.Compare(x.place, y.place)
		})
		ledger = func() (usageRow, error) {
			for len(keys) > 0 {
				k := keys[0]
				keys = keys[1:]
				if day := usageDay(k.day); day >= from {
					return usageRow{day: day, place: k.place, n: *t.counts[k], ok: true}, nil
				}
			}
			return usageRow{}, nil
		}
	}
	rows, err := tx.Query(ctx, `SELECT to_char(day, 'YYYY-MM-DD'), place_id, requests FROM rm_usage_daily
		WHERE day >= coalesce(nullif($1, '')::date, '-infinity') ORDER BY day, place_id COLLATE "C"`, from)
	if err != nil {
		return err
	}
	defer rows.Close()
	model := usageRows(rows)

	var more int
	differ := func(format string, args ...any) {
		if more++; more <= usageDiffs {
			a.differ(format, args...)
		}
	}
	l, err := ledger()
	if err != nil {
		return err
	}
	m, err := model()
	if err != nil {
		return err
	}
	for l.ok || m.ok {
		switch {
		case l.before(m):
			differ("usage %s place %s: the ledger has %d metered requests, missing from the usage read model", l.day, l.place, l.n)
			l, err = ledger()
		case m.before(l):
			differ("usage %s place %s: the usage read model has %d requests, the ledger none", m.day, m.place, m.n)
			m, err = model()
		default:
			if l.n != m.n {
				differ("usage %s place %s: the usage read model has %d requests, the ledger %d", m.day, m.place, m.n, l.n)
			}
			if l, err = ledger(); err == nil {
				m, err = model()
			}
		}
		if err != nil {
			return err
		}
	}
	if more > usageDiffs {
		a.differ("usage: %d more days and places differ", more-usageDiffs)
	}
	return nil
}
