package audit

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/projections"
)

// catalogProjection keeps the catalog's read models, rm_towns, rm_places and rm_events
// (projections.Catalog): what place detail, lists, search, towns and events serve.
const catalogProjection = "catalog"

// catalogDiffs bounds the DIFF lines of each catalog table; a count of the rest follows.
const catalogDiffs = 100

// compareCatalog compares the catalog's read models, as the snapshot shows them, with the
// newest import of each record at or before the catalog projection's checkpoint (a
// whole-store audit): every column of a place's row, its stored list row and detail rendered
// again at an instant of the trust window stored with them, its is_chain from the names of
// all places, and each town and calendar event with the document it was imported with.
// Records whose history is archived are left out: their imports may be in the archive file.
func (a *auditor) compareCatalog(ctx context.Context, tx pgx.Tx) error {
	cp := a.checkpoints[catalogProjection]
	txid := strconv.FormatUint(cp.TxID, 10)
	if err := a.comparePlaces(ctx, tx, txid, cp.Pos); err != nil {
		return err
	}
	if err := a.compareChains(ctx, tx); err != nil {
		return err
	}
	return a.compareTownsAndEvents(ctx, tx, txid, cp.Pos)
}

// catalogLatest is the newest import of each record of type typ at or before the checkpoint
// ($1 transaction id, $2 position), with the record's stream; live records only. The newest
// of a stream is its largest position (a stream's versions follow its positions), found
// without its payload, which is read for that one event only: a catalog imported many times
// is not sorted, payloads and all, to keep one import a record.
const catalogLatest = `
	SELECT n.stream_no, e.version, e.position, e.recorded_at, e.payload::text AS payload
	FROM (SELECT stream_no, max(position) AS position FROM events
		WHERE type = %s AND (transaction_id, position) <= ($1::text::xid8, $2::bigint)
		GROUP BY stream_no) n
	CROSS JOIN LATERAL (SELECT version, position, recorded_at, payload FROM events
		WHERE stream_no = n.stream_no AND position = n.position) e
	WHERE NOT EXISTS (SELECT 1 FROM stream_boundaries b WHERE b.stream_no = n.stream_no)`

// limited counts DIFF lines of one kind and keeps the first catalogDiffs of them.
type limited struct {
	a    *auditor
	what string
	mu   sync.Mutex
	n    int
}

func (l *limited) differ(format string, args ...any) {
	l.mu.Lock()
	l.n++
	keep := l.n <= catalogDiffs
	l.mu.Unlock()
	if keep {
		l.a.differ(format, args...)
	}
}

func (l *limited) close() {
	if l.n > catalogDiffs {
		l.a.differ("%s: %d more differ", l.what, l.n-catalogDiffs)
	}
}

func (a *auditor) comparePlaces(ctx context.Context, tx pgx.Tx, txid string, pos int64) error {
	rows, err := tx.Query(ctx, `
		WITH latest AS (`+fmt.Sprintf(catalogLatest, `'`+domain.EventPlaceImported+`'`)+`),
		model AS (
			SELECT p.*, s.stream_no FROM rm_places p LEFT JOIN streams s ON s.stream_id = 'place-' || p.place_id
			WHERE NOT EXISTS (SELECT 1 FROM stream_boundaries b WHERE b.stream_no = s.stream_no))
		SELECT l.version, l.position, l.recorded_at, l.payload, m.place_id IS NOT NULL,
			m.row_json IS NOT NULL, m.detail_json IS NOT NULL,
			-- a row only on the import's side scans as empty (placePair.inModel false)
			coalesce(m.place_id, ''), coalesce(m.name, ''), coalesce(m.normalized_name, ''), coalesce(m.category, ''),
			coalesce(m.doc, ''), m.town_slug, coalesce(m.is_gem, false), coalesce(m.marked_chain, false),
			coalesce(m.has_menu, false), coalesce(m.has_review, false), m.local_gem_score, m.rating, m.latitude,
			m.longitude, m.rating_count, coalesce(m.version, 0), coalesce(m.updated_at, 'epoch'), coalesce(m.row_json, ''),
			coalesce(m.detail_json, ''), m.trust_from, m.trust_until, m.menu_json, coalesce(m.menu_items, 0), m.reviews_json
		FROM latest l FULL JOIN model m ON m.stream_no = l.stream_no`, txid, pos)
	if err != nil {
		return err
	}
	defer rows.Close()
	diffs := &limited{a: a, what: "places of the catalog read model"}
	defer diffs.close()

	// Decoding and rendering a place is most of the pass: a worker per CPU does it, while
	// this goroutine reads the rows.
	pairs := make(chan placePair, 64)
	compared := make(chan error, 1)
	go func() { compared <- comparePlacesFrom(pairs, diffs) }()
	err = scanPlaces(ctx, rows, pairs)
	if cerr := <-compared; err == nil {
		err = cerr
	}
	return err
}

// scanPlaces sends every row of rows to pairs, and closes it.
func scanPlaces(ctx context.Context, rows pgx.Rows, pairs chan<- placePair) error {
	defer close(pairs)
	for rows.Next() {
		var p placePair
		m := &p.model
		if err := rows.Scan(&p.version, &p.position, &p.recordedAt, &p.payload, &p.inModel, &p.views, &p.detail,
			&m.PlaceID, &m.Name, &m.NormalizedName, &m.Category, &m.Doc, &m.TownSlug, &m.IsGem, &m.MarkedChain,
			&m.HasMenu, &m.HasReview, &m.LocalGemScore, &m.Rating, &m.Latitude, &m.Longitude, &m.RatingCount,
			&m.Version, &m.UpdatedAt, &m.RowJSON, &m.DetailJSON, &m.TrustFrom, &m.TrustUntil, &m.MenuJSON,
			&m.MenuItems, &m.ReviewsJSON); err != nil {
			return err
		}
		select {
		case pairs <- p:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return rows.Err()
}

// comparePlacesFrom compares every pair sent until pairs is closed, on a goroutine per CPU,
// and returns the first error.
func comparePlacesFrom(pairs <-chan placePair, diffs *limited) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range pairs {
				if err := comparePlace(p, diffs); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// placePair is a place's newest import at or before the checkpoint (version nil when there
// is none) and its row in the read model (inModel false when there is none).
type placePair struct {
	version, position *int64
	recordedAt        *time.Time
	payload           *string
	inModel           bool
	views, detail     bool // the row holds its views (row_json), and a stored detail
	model             projections.PlaceRow
}

// The columns of a place's views, and of its stored detail among them. The read API serves
// none of the views of a row stored before views existed (migration 0011: row_json NULL), nor
// a stored detail whose trust window ends before the place was imported (migration 0019 marks
// details so: a window ending in 1970): it renders them from doc. The audit compares what is
// served.
var (
	viewColumns   = map[string]bool{"row_json": true, "detail_json": true, "trust_from": true, "trust_until": true, "menu_json": true, "menu_items": true, "reviews_json": true}
	detailColumns = map[string]bool{"detail_json": true, "trust_from": true, "trust_until": true}
)

func comparePlace(p placePair, diffs *limited) error {
	if p.version == nil {
		diffs.differ("place %s: in the catalog read model, but no import of it is at or before its checkpoint", p.model.PlaceID)
		return nil
	}
	e := eventstore.Event{Version: *p.version, Position: *p.position, RecordedAt: *p.recordedAt, Payload: []byte(*p.payload)}
	if !p.inModel {
		want, err := projections.PlaceRowOf(e, e.RecordedAt)
		if err != nil {
			return err
		}
		diffs.differ("place %s: missing from the catalog read model (its import v%d, position %d, is at or before its checkpoint)",
			want.PlaceID, e.Version, e.Position)
		return nil
	}
	got := p.model
	unserved := map[string]bool{}
	switch {
	case !p.views:
		unserved = viewColumns
	case !p.detail || got.TrustUntil != nil && got.TrustUntil.Before(got.UpdatedAt):
		unserved = detailColumns
	}
	at := e.RecordedAt
	if !unserved["trust_until"] {
		at = renderedAt(got, e.RecordedAt)
	}
	want, err := projections.PlaceRowOf(e, at)
	if err != nil {
		return err
	}
	if got.Version != want.Version {
		diffs.differ("place %s: the catalog read model holds v%d, its newest import at or before its checkpoint is v%d (position %d)",
			want.PlaceID, got.Version, e.Version, e.Position)
		return nil
	}
	for _, c := range placeColumns(got, want) {
		if !unserved[c.name] && c.differs() {
			// A row stored before views kept its document as jsonb printed it when migration
			// 0011 made the column text (keys reordered, spaces added): the read API decodes it,
			// so its value is what is served.
			if c.name == "doc" && !p.views && sameJSON(got.Doc, want.Doc) {
				continue
			}
			g, w := c.excerpts()
			diffs.differ("place %s: the catalog read model has %s %s, its import v%d (position %d) says %s",
				want.PlaceID, c.name, g, e.Version, e.Position, w)
		}
	}
	return nil
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	ja, errA := json.Marshal(va)
	jb, errB := json.Marshal(vb)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// renderedAt is an instant of the stored trust window of a place's row, (TrustFrom,
// TrustUntil]: rendered at it, the place gives the stored bytes and window back.
func renderedAt(r projections.PlaceRow, importedAt time.Time) time.Time {
	switch {
	case r.TrustUntil != nil:
		return *r.TrustUntil
	case r.TrustFrom != nil:
		return r.TrustFrom.Add(time.Microsecond)
	}
	return importedAt
}

// column is one column of a row, as stored and as its import says.
type column struct {
	name      string
	got, want any
}

// differs reports whether the column's two values differ. Most columns of most rows are
// equal, and a place's texts are kilobytes: they are compared as they are, and written out
// (show) only when they differ.
func (c column) differs() bool {
	switch g := c.got.(type) {
	case string:
		if w, ok := c.want.(string); ok {
			return g != w
		}
	case *string:
		if w, ok := c.want.(*string); ok {
			return (g == nil) != (w == nil) || g != nil && *g != *w
		}
	case time.Time:
		if w, ok := c.want.(time.Time); ok {
			return !g.Equal(w)
		}
	case *time.Time:
		if w, ok := c.want.(*time.Time); ok {
			return (g == nil) != (w == nil) || g != nil && !g.Equal(*w)
		}
	case *float64:
		if w, ok := c.want.(*float64); ok {
			return (g == nil) != (w == nil) || g != nil && *g != *w
		}
	case *int:
		if w, ok := c.want.(*int); ok {
			return (g == nil) != (w == nil) || g != nil && *g != *w
		}
	case bool, int, int64:
		return c.got != c.want
	}
	return show(c.got) != show(c.want)
}

// excerptAround is how much of a long value a DIFF line shows on each side of where the
// stored value and the import's first differ.
const excerptAround = 40

// excerpts are the column's two values as a DIFF line shows them: whole when short, else
// each cut to the bytes around the first that differs.
func (c column) excerpts() (string, string) {
	got, want := show(c.got), show(c.want)
	if len(got) <= 2*excerptAround && len(want) <= 2*excerptAround {
		return got, want
	}
	at := 0
	for at < len(got) && at < len(want) && got[at] == want[at] {
		at++
	}
	cut := func(v string) string {
		from, to := max(at-excerptAround, 0), min(at+excerptAround, len(v))
		for from > 0 && !utf8.RuneStart(v[from]) {
			from--
		}
		for to < len(v) && !utf8.RuneStart(v[to]) {
			to++
		}
		out := v[from:to]
		if from > 0 {
			out = "…" + out
		}
		if to < len(v) {
			out += "…"
		}
		return out
	}
	return cut(got), cut(want)
}

func placeColumns(got, want projections.PlaceRow) []column {
	c := func(name string, g, w any) column { return column{name, g, w} }
	return []column{
		c("place_id", got.PlaceID, want.PlaceID), c("name", got.Name, want.Name),
		c("normalized_name", got.NormalizedName, want.NormalizedName), c("category", got.Category, want.Category),
		c("doc", got.Doc, want.Doc), c("town_slug", got.TownSlug, want.TownSlug), c("is_gem", got.IsGem, want.IsGem),
		c("marked_chain", got.MarkedChain, want.MarkedChain), c("has_menu", got.HasMenu, want.HasMenu),
		c("has_review", got.HasReview, want.HasReview), c("local_gem_score", got.LocalGemScore, want.LocalGemScore),
		c("rating", got.Rating, want.Rating), c("latitude", got.Latitude, want.Latitude),
		c("longitude", got.Longitude, want.Longitude), c("rating_count", got.RatingCount, want.RatingCount),
		c("version", got.Version, want.Version), c("updated_at", got.UpdatedAt, want.UpdatedAt),
		c("row_json", got.RowJSON, want.RowJSON), c("detail_json", got.DetailJSON, want.DetailJSON),
		c("trust_from", got.TrustFrom, want.TrustFrom), c("trust_until", got.TrustUntil, want.TrustUntil),
		c("menu_json", got.MenuJSON, want.MenuJSON), c("menu_items", got.MenuItems, want.MenuItems),
		c("reviews_json", got.ReviewsJSON, want.ReviewsJSON),
	}
}

// show writes a column's value for a DIFF line: NULL, a time in UTC, a text quoted, anything
// else as fmt does.
func show(v any) string {
	switch v := v.(type) {
	case *string:
		if v == nil {
			return "NULL"
		}
		return show(*v)
	case string:
		return strconv.Quote(v)
	case *time.Time:
		if v == nil {
			return "NULL"
		}
		return show(*v)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	case *float64:
		if v == nil {
			return "NULL"
		}
		return strconv.FormatFloat(*v, 'g', -1, 64)
	case *int:
		if v == nil {
			return "NULL"
		}
		return strconv.Itoa(*v)
	}
	return fmt.Sprint(v)
}

// compareChains checks each place's is_chain against the names of all places: marked
// is_chain at import, or a normalized name shared by domain.ChainThreshold places or more (a
// name with no letter or digit normalizes to "", which names no chain).
func (a *auditor) compareChains(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `
		SELECT p.place_id, p.is_chain, p.marked_chain, c.n
		FROM rm_places p JOIN (SELECT normalized_name, count(*) AS n FROM rm_places GROUP BY 1) c USING (normalized_name)
		WHERE p.is_chain IS DISTINCT FROM (p.marked_chain OR (c.n >= $1 AND p.normalized_name <> ''))
		ORDER BY p.place_id`, domain.ChainThreshold)
	if err != nil {
		return err
	}
	defer rows.Close()
	diffs := &limited{a: a, what: "chain flags of the catalog read model"}
	defer diffs.close()
	var (
		id           string
		chain, mark  bool
		sharingNames int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &chain, &mark, &sharingNames}, func() error {
		diffs.differ("place %s: the catalog read model has is_chain %t, but it was imported with is_chain %t and the places of its name number %d (a chain from %d)",
			id, chain, mark, sharingNames, domain.ChainThreshold)
		return nil
	})
	return err
}

// compareTownsAndEvents compares rm_towns and rm_events with their records' newest imports:
// the document each row holds (as JSON), its version, and the columns read from it.
func (a *auditor) compareTownsAndEvents(ctx context.Context, tx pgx.Tx, txid string, pos int64) error {
	var (
		slug, name, eventID *string
		county, eventTown   *string
		population          *int
		startDate           *time.Time
	)
	town := func(payload []byte) (string, []column, error) {
		var t domain.Town
		if err := json.Unmarshal(payload, &t); err != nil {
			return "", nil, err
		}
		return t.Slug, []column{{"slug", slug, t.Slug}, {"name", name, t.Name},
			{"county", county, t.County}, {"population", population, t.Population}}, nil
	}
	event := func(payload []byte) (string, []column, error) {
		var e domain.CalendarEvent
		if err := json.Unmarshal(payload, &e); err != nil {
			return "", nil, err
		}
		// timestamptz holds microseconds: the projection's start_date is the import's, cut to them.
		return e.EventID, []column{{"event_id", eventID, e.EventID}, {"town_slug", eventTown, e.TownSlug},
			{"start_date", startDate, e.StartDate.Truncate(time.Microsecond)}}, nil
	}
	for _, t := range []struct {
		kind, typ, table, prefix, key, columns string
		scan                                   []any
		want                                   func([]byte) (string, []column, error)
	}{
		{"town", domain.EventTownImported, "rm_towns", "town-", "slug", "m.slug, m.name, m.county, m.population",
			[]any{&slug, &name, &county, &population}, town},
		{"event", domain.EventCalendarEventImported, "rm_events", "event-", "event_id", "m.event_id, m.town_slug, m.start_date",
			[]any{&eventID, &eventTown, &startDate}, event},
	} {
		rows, err := tx.Query(ctx, `
			WITH latest AS (`+fmt.Sprintf(catalogLatest, `'`+t.typ+`'`)+`),
			model AS (
				SELECT m.*, s.stream_no FROM `+t.table+` m LEFT JOIN streams s ON s.stream_id = '`+t.prefix+`' || m.`+t.key+`
				WHERE NOT EXISTS (SELECT 1 FROM stream_boundaries b WHERE b.stream_no = s.stream_no))
			SELECT l.version, l.position, l.payload, m.version, m.doc = l.payload::jsonb, `+t.columns+`
			FROM latest l FULL JOIN model m ON m.stream_no = l.stream_no`, txid, pos)
		if err != nil {
			return err
		}
		diffs := &limited{a: a, what: t.table + " of the catalog read model"}
		var (
			version, position, modelVersion *int64
			payload                         *string
			sameDoc                         *bool
		)
		_, err = pgx.ForEachRow(rows, append([]any{&version, &position, &payload, &modelVersion, &sameDoc}, t.scan...), func() error {
			if version == nil {
				diffs.differ("%s %s: in the catalog read model, but no import of it is at or before its checkpoint", t.kind, **t.scan[0].(**string)) // the key column is NOT NULL
				return nil
			}
			id, cols, err := t.want([]byte(*payload))
			if err != nil {
				return fmt.Errorf("%s import at position %d: %w", t.kind, *position, err)
			}
			switch {
			case modelVersion == nil:
				diffs.differ("%s %s: missing from the catalog read model (its import v%d, position %d, is at or before its checkpoint)",
					t.kind, id, *version, *position)
			case *modelVersion != *version:
				diffs.differ("%s %s: the catalog read model holds v%d, its newest import at or before its checkpoint is v%d (position %d)",
					t.kind, id, *modelVersion, *version, *position)
			default:
				if !*sameDoc {
					diffs.differ("%s %s: the catalog read model's doc differs from its import v%d (position %d)", t.kind, id, *version, *position)
				}
				for _, c := range cols {
					if c.differs() {
						g, w := c.excerpts()
						diffs.differ("%s %s: the catalog read model has %s %s, its import v%d (position %d) says %s",
							t.kind, id, c.name, g, *version, *position, w)
					}
				}
			}
			return nil
		})
		diffs.close()
		if err != nil {
			return err
		}
	}
	return nil
}
