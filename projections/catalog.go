package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	fastjson "github.com/segmentio/encoding/json"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// Catalog projects the catalog events into rm_towns, rm_places and rm_events. Each row
// holds the record as last imported; rm_places also derives is_chain (docs/api.md, "Trending
// and hidden gems": marked is_chain, or a normalized name shared by domain.ChainThreshold or
// more places) and holds the place rendered as the read API serves it (domain.RenderPlace),
// canonical_url apart: its base is the serving process's setting, so a new base needs no
// rebuild.
type Catalog struct {
	// Clock dates the field_trust rendered into a place's detail; the read API serves it
	// while the request's instant lies in the stored trust window, and renders afresh outside.
	Clock func() time.Time
}

// Name identifies the projection's checkpoint.
func (Catalog) Name() string { return "catalog" }

// EventTypes are the catalog's imports: the charges that make up most of the store are never
// read.
func (Catalog) EventTypes() []string { return domain.CatalogEventTypes }

// catalogChunk bounds the rows of one upsert statement. Places are several kB each: in
// larger chunks encoding the statement's arrays costs more than the statement.
const catalogChunk = 500

// Apply upserts the records of the imported events and ignores every other event type.
// The newest version of a record wins, within the batch and against the row already
// stored, so events may come in any order and applying them again changes nothing.
func (c Catalog) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	towns := catalogLatest{}
	places := catalogLatest{}
	cal := catalogLatest{}
	for _, e := range events {
		switch e.Type {
		case domain.EventTownImported:
			towns.add(e)
		case domain.EventPlaceImported:
			places.add(e)
		case domain.EventCalendarEventImported:
			cal.add(e)
		}
	}
	if err := catalogApplyTowns(ctx, tx, towns.events()); err != nil {
		return err
	}
	if err := catalogApplyPlaces(ctx, tx, places.events(), c.Clock()); err != nil {
		return err
	}
	return catalogApplyEvents(ctx, tx, cal.events())
}

// Reset empties the projection's tables before a rebuild.
func (Catalog) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE rm_towns, rm_places, rm_events`)
	return err
}

// catalogLatest keeps the newest version of each stream, in order of first appearance.
// Versions, not batch order, decide: a later version of a stream may arrive first.
type catalogLatest struct {
	order []string
	last  map[string]eventstore.Event
}

func (l *catalogLatest) add(e eventstore.Event) {
	if l.last == nil {
		l.last = map[string]eventstore.Event{}
	}
	prev, ok := l.last[e.StreamID]
	if !ok {
		l.order = append(l.order, e.StreamID)
	}
	if !ok || e.Version >= prev.Version {
		l.last[e.StreamID] = e
	}
}

func (l *catalogLatest) events() []eventstore.Event {
	out := make([]eventstore.Event, len(l.order))
	for i, s := range l.order {
		out[i] = l.last[s]
	}
	return out
}

func catalogChunks(events []eventstore.Event, fn func([]eventstore.Event) error) error {
	for start := 0; start < len(events); start += catalogChunk {
		if err := fn(events[start:min(start+catalogChunk, len(events))]); err != nil {
			return err
		}
	}
	return nil
}

func catalogApplyTowns(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	return catalogChunks(events, func(events []eventstore.Event) error {
		n := len(events)
		slugs, names, docs := make([]string, n), make([]string, n), make([]string, n)
		counties, pops, versions := make([]*string, n), make([]*int, n), make([]int64, n)
		for i, e := range events {
			var t domain.Town
			if err := json.Unmarshal(e.Payload, &t); err != nil {
				return fmt.Errorf("catalog projection: event %d: %w", e.Position, err)
			}
			slugs[i], names[i], counties[i], pops[i], docs[i], versions[i] = t.Slug, t.Name, t.County, t.Population, string(e.Payload), e.Version
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO rm_towns (slug, name, county, population, doc, version)
			SELECT slug, name, county, population, doc::jsonb, version
			FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::bigint[])
				AS n(slug, name, county, population, doc, version)
			ON CONFLICT (slug) DO UPDATE SET name = EXCLUDED.name, county = EXCLUDED.county,
				population = EXCLUDED.population, doc = EXCLUDED.doc, version = EXCLUDED.version
			WHERE rm_towns.version <= EXCLUDED.version`,
			slugs, names, counties, pops, docs, versions)
		if err != nil {
			return fmt.Errorf("catalog projection: towns: %w", err)
		}
		return nil
	})
}

// placeChunk is a chunk of places ready to upsert: the statement's arguments, column by column.
type placeChunk struct {
	ids, norms []string
	args       []any
}

// decodePlace decodes a PlaceImported payload. Decoding is the biggest single cost of the
// catalog's replay, and segmentio's decoder, which matches encoding/json's results
// (TestAPlacePayloadDecodesAsEncodingJSONDecodesIt), takes about 13 µs for a demo place where
// encoding/json takes 31: a 150,000-place rebuild of the catalog went from 11.1 s to 9.9 s.
func decodePlace(payload []byte, p *domain.Place) error { return fastjson.Unmarshal(payload, p) }

// PlaceRow is a place's row of rm_places as the catalog projection writes it from a
// PlaceImported event, is_chain apart (it depends on the other places' names). kyapi audit
// compares the table with it.
type PlaceRow struct {
	PlaceID, Name, NormalizedName, Category, Doc string
	TownSlug                                     *string
	IsGem, MarkedChain, HasMenu, HasReview       bool
	LocalGemScore, Rating, Latitude, Longitude   *float64
	RatingCount                                  *int
	Version                                      int64
	UpdatedAt                                    time.Time
	RowJSON, DetailJSON                          string
	TrustFrom, TrustUntil                        *time.Time
	MenuJSON                                     *string
	MenuItems                                    int
	ReviewsJSON                                  *string
}

// PlaceRowOf is the row of the place e imported, its detail's field_trust rendered as of now.
func PlaceRowOf(e eventstore.Event, now time.Time) (PlaceRow, error) {
	var p domain.Place
	if err := decodePlace(e.Payload, &p); err != nil {
		return PlaceRow{}, fmt.Errorf("catalog projection: event %d: %w", e.Position, err)
	}
	v, err := domain.RenderPlace(p, e.RecordedAt, now)
	if err != nil {
		return PlaceRow{}, fmt.Errorf("catalog projection: event %d: %w", e.Position, err)
	}
	return PlaceRow{PlaceID: p.PlaceID, Name: p.Name, NormalizedName: domain.NormalizedName(p.Name), Category: p.Category,
		Doc: string(e.Payload), TownSlug: p.TownSlug, IsGem: p.IsGem, MarkedChain: p.IsChain,
		HasMenu: len(p.Menu) > 0, HasReview: p.ReviewSummary != nil, LocalGemScore: p.LocalGemScore, Rating: p.Rating,
		Latitude: p.Latitude, Longitude: p.Longitude, RatingCount: p.RatingCount, Version: e.Version, UpdatedAt: e.RecordedAt,
		RowJSON: string(v.Row), DetailJSON: string(v.Detail), TrustFrom: v.TrustFrom, TrustUntil: v.TrustUntil,
		MenuJSON: optionalText(v.Menu), MenuItems: v.MenuItems, ReviewsJSON: optionalText(v.Reviews)}, nil
}

// preparePlaces decodes and renders a chunk of PlaceImported events.
func preparePlaces(events []eventstore.Event, now time.Time) (placeChunk, error) {
	n := len(events)
	var (
		ids, names, norms, cats, docs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		towns                         = make([]*string, n)
		gems, marked, menus, reviews  = make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n)
		scores, ratings, lats, lngs   = make([]*float64, n), make([]*float64, n), make([]*float64, n), make([]*float64, n)
		counts                        = make([]*int, n)
		versions                      = make([]int64, n)
		updated                       = make([]any, n)
		rowJSON, detailJSON           = make([]string, n), make([]string, n)
		menuJSON, reviewsJSON         = make([]*string, n), make([]*string, n)
		menuItems                     = make([]int, n)
		trustFrom, trustUntil         = make([]*time.Time, n), make([]*time.Time, n)
	)
	for i, e := range events {
		r, err := PlaceRowOf(e, now)
		if err != nil {
			return placeChunk{}, err
		}
		ids[i], names[i], norms[i], cats[i], docs[i] = r.PlaceID, r.Name, r.NormalizedName, r.Category, r.Doc
		towns[i] = r.TownSlug
		gems[i], marked[i], menus[i], reviews[i] = r.IsGem, r.MarkedChain, r.HasMenu, r.HasReview
		scores[i], ratings[i], lats[i], lngs[i] = r.LocalGemScore, r.Rating, r.Latitude, r.Longitude
		counts[i], versions[i], updated[i] = r.RatingCount, r.Version, r.UpdatedAt
		rowJSON[i], detailJSON[i], menuItems[i] = r.RowJSON, r.DetailJSON, r.MenuItems
		menuJSON[i], reviewsJSON[i] = r.MenuJSON, r.ReviewsJSON
		trustFrom[i], trustUntil[i] = r.TrustFrom, r.TrustUntil
	}
	return placeChunk{ids: ids, norms: norms, args: []any{ids, towns, names, norms, cats, gems, marked, scores, ratings,
		counts, lats, lngs, docs, menus, reviews, versions, updated,
		rowJSON, detailJSON, trustFrom, trustUntil, menuJSON, menuItems, reviewsJSON}}, nil
}

func catalogApplyPlaces(ctx context.Context, tx pgx.Tx, events []eventstore.Event, now time.Time) error {
	// Decoding and rendering a chunk (Go) overlaps the upsert of the one before (PostgreSQL).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type prepared struct {
		chunk placeChunk
		err   error
	}
	ready := make(chan prepared, 1)
	go func() {
		defer close(ready)
		_ = catalogChunks(events, func(events []eventstore.Event) error {
			c, err := preparePlaces(events, now)
			select {
			case ready <- prepared{c, err}:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	// The names whose chain flag may change: every name written, and every name a renamed
	// place leaves. They are recounted once, after every chunk.
	var touched []string
	for p := range ready {
		if p.err != nil {
			return p.err
		}
		ids := p.chunk.ids
		rows, err := tx.Query(ctx, `SELECT DISTINCT normalized_name FROM rm_places WHERE place_id = ANY($1)`, ids)
		if err != nil {
			return fmt.Errorf("catalog projection: places: %w", err)
		}
		oldNames, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("catalog projection: places: %w", err)
		}
		touched = append(append(touched, p.chunk.norms...), oldNames...)
		_, err = tx.Exec(ctx, `
			INSERT INTO rm_places (place_id, town_slug, name, normalized_name, category, is_gem,
				marked_chain, is_chain, local_gem_score, rating, rating_count, latitude, longitude,
				doc, has_menu, has_review, version, updated_at,
				row_json, detail_json, trust_from, trust_until, menu_json, menu_items, reviews_json)
			SELECT place_id, town_slug, name, normalized_name, category, is_gem,
				marked_chain, marked_chain, local_gem_score, rating, rating_count, latitude, longitude,
				doc, has_menu, has_review, version, updated_at,
				row_json, detail_json, trust_from, trust_until, menu_json, menu_items, reviews_json
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bool[],
				$7::bool[], $8::float8[], $9::float8[], $10::int[], $11::float8[], $12::float8[],
				$13::text[], $14::bool[], $15::bool[], $16::bigint[], $17::timestamptz[],
				$18::text[], $19::text[], $20::timestamptz[], $21::timestamptz[], $22::text[],
				$23::int[], $24::text[])
				AS n(place_id, town_slug, name, normalized_name, category, is_gem,
					marked_chain, local_gem_score, rating, rating_count, latitude, longitude,
					doc, has_menu, has_review, version, updated_at,
					row_json, detail_json, trust_from, trust_until, menu_json, menu_items, reviews_json)
			ON CONFLICT (place_id) DO UPDATE SET town_slug = EXCLUDED.town_slug, name = EXCLUDED.name,
				normalized_name = EXCLUDED.normalized_name, category = EXCLUDED.category,
				is_gem = EXCLUDED.is_gem, marked_chain = EXCLUDED.marked_chain,
				local_gem_score = EXCLUDED.local_gem_score, rating = EXCLUDED.rating,
				rating_count = EXCLUDED.rating_count, latitude = EXCLUDED.latitude,
				longitude = EXCLUDED.longitude, doc = EXCLUDED.doc, has_menu = EXCLUDED.has_menu,
				has_review = EXCLUDED.has_review, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at,
				row_json = EXCLUDED.row_json, detail_json = EXCLUDED.detail_json,
				trust_from = EXCLUDED.trust_from, trust_until = EXCLUDED.trust_until,
				menu_json = EXCLUDED.menu_json, menu_items = EXCLUDED.menu_items,
				reviews_json = EXCLUDED.reviews_json
			WHERE rm_places.version <= EXCLUDED.version`, p.chunk.args...)
		if err != nil {
			return fmt.Errorf("catalog projection: places: %w", err)
		}
	}
	if err := ctx.Err(); err != nil || len(touched) == 0 {
		return err
	}
	slices.Sort(touched)
	_, err := tx.Exec(ctx, `
		UPDATE rm_places p SET is_chain = p.marked_chain OR (c.n >= $2 AND c.normalized_name <> '')
		FROM (SELECT normalized_name, count(*) AS n FROM rm_places
			WHERE normalized_name = ANY($1) GROUP BY 1) c
		WHERE p.normalized_name = c.normalized_name
		  AND p.is_chain IS DISTINCT FROM (p.marked_chain OR (c.n >= $2 AND c.normalized_name <> ''))`,
		slices.Compact(touched), domain.ChainThreshold)
	if err != nil {
		return fmt.Errorf("catalog projection: chain flags: %w", err)
	}
	return nil
}

// optionalText is b as a nullable text column: NULL when b is nil.
func optionalText(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

func catalogApplyEvents(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	return catalogChunks(events, func(events []eventstore.Event) error {
		n := len(events)
		ids, docs, towns := make([]string, n), make([]string, n), make([]*string, n)
		starts, versions := make([]any, n), make([]int64, n)
		for i, e := range events {
			var ce domain.CalendarEvent
			if err := json.Unmarshal(e.Payload, &ce); err != nil {
				return fmt.Errorf("catalog projection: event %d: %w", e.Position, err)
			}
			ids[i], towns[i], starts[i], docs[i], versions[i] = ce.EventID, ce.TownSlug, ce.StartDate, string(e.Payload), e.Version
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO rm_events (event_id, town_slug, start_date, doc, version)
			SELECT event_id, town_slug, start_date, doc::jsonb, version
			FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::bigint[])
				AS n(event_id, town_slug, start_date, doc, version)
			ON CONFLICT (event_id) DO UPDATE SET town_slug = EXCLUDED.town_slug,
				start_date = EXCLUDED.start_date, doc = EXCLUDED.doc, version = EXCLUDED.version
			WHERE rm_events.version <= EXCLUDED.version`,
			ids, towns, starts, docs, versions)
		if err != nil {
			return fmt.Errorf("catalog projection: events: %w", err)
		}
		return nil
	})
}
