package readapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// The read API serves places from the views the catalog projection stored in rm_places
// (domain.RenderPlace): bytes ready to write, no document decoded per request. A place
// whose row has no view yet (written before views existed), or no stored detail, or whose
// detail was rendered with a field_trust that no longer holds at the request's instant (or
// for any instant: migration 0019, when field_trust gained entries), is rendered from its
// stored document instead; that costs a decode, and gives the same bytes a fresh view would.

// loadDetail reads the place detail payload of place id; ok is false when there is none.
func (s *Server) loadDetail(ctx context.Context, id string) (data rawJSON, ok bool, err error) {
	var v domain.PlaceView
	err = s.Pool.QueryRow(ctx, `SELECT row_json, detail_json, trust_from, trust_until FROM rm_places WHERE place_id = $1`, id).
		Scan(&v.Row, &v.Detail, &v.TrustFrom, &v.TrustUntil)
	if err != nil {
		return nil, false, noRow(err, "load place")
	}
	now := s.now()
	if v.Row == nil || v.Detail == nil || !v.TrustHolds(now) {
		if v, err = s.renderStored(ctx, id, now); err != nil {
			return nil, false, err
		}
	}
	detail := make(rawJSON, 0, len(v.Row)+len(s.CanonicalBaseURL)+len(id)+len(v.Detail)+16)
	return append(s.appendRow(detail, id, v.Row), v.Detail...), true, nil
}

// loadMenu reads the menu of place id as served and its number of items; found is false
// when there is no such place, menu nil when the place has none.
func (s *Server) loadMenu(ctx context.Context, id string) (menu rawJSON, items int, found bool, err error) {
	var rendered bool
	err = s.Pool.QueryRow(ctx, `SELECT row_json IS NOT NULL, menu_json, menu_items FROM rm_places WHERE place_id = $1`, id).
		Scan(&rendered, &menu, &items)
	if err != nil {
		return nil, 0, false, noRow(err, "load menu")
	}
	if !rendered {
		v, err := s.renderStored(ctx, id, s.now())
		if err != nil {
			return nil, 0, false, err
		}
		menu, items = v.Menu, v.MenuItems
	}
	return menu, items, true, nil
}

// loadReviews reads the review summary of place id as served; found is false when there
// is no such place, summary nil when the place has none.
func (s *Server) loadReviews(ctx context.Context, id string) (summary rawJSON, found bool, err error) {
	var rendered bool
	err = s.Pool.QueryRow(ctx, `SELECT row_json IS NOT NULL, reviews_json FROM rm_places WHERE place_id = $1`, id).
		Scan(&rendered, &summary)
	if err != nil {
		return nil, false, noRow(err, "load reviews")
	}
	if !rendered {
		v, err := s.renderStored(ctx, id, s.now())
		if err != nil {
			return nil, false, err
		}
		summary = v.Reviews
	}
	return summary, true, nil
}

// noRow is err, except that no row at all is no error: the loaders report it as not found.
func noRow(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// renderStored renders place id from its stored document, as of now.
func (s *Server) renderStored(ctx context.Context, id string, now time.Time) (domain.PlaceView, error) {
	var doc []byte
	var updated time.Time
	err := s.Pool.QueryRow(ctx, `SELECT doc, updated_at FROM rm_places WHERE place_id = $1`, id).Scan(&doc, &updated)
	if err != nil {
		return domain.PlaceView{}, fmt.Errorf("load place %s: %w", id, err)
	}
	return renderDoc(doc, updated, now)
}

func renderDoc(doc []byte, updated, now time.Time) (domain.PlaceView, error) {
	var p domain.Place
	if err := json.Unmarshal(doc, &p); err != nil {
		return domain.PlaceView{}, fmt.Errorf("load place: %w", err)
	}
	v, err := domain.RenderPlace(p, updated, now)
	if err != nil {
		return v, fmt.Errorf("render place %s: %w", p.PlaceID, err)
	}
	return v, nil
}

// storedRow is a place's list row as loadRows reads it, its town ("" when it has none) and
// where it is (located false when it has no coordinates).
type storedRow struct {
	row     []byte
	town    string
	at      placeindex.GeoPoint
	located bool
}

// loadRows reads the list rows of the places with the given ids, keyed by id, each up to
// canonical_url's value included (close it, or add distance_km first); ids without a row
// are missing from the map.
func (s *Server) loadRows(ctx context.Context, ids []string) (map[string]storedRow, error) {
	out := make(map[string]storedRow, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.Pool.Query(ctx, `SELECT place_id, row_json, CASE WHEN row_json IS NULL THEN doc END, updated_at,
			coalesce(town_slug, ''), latitude, longitude
		FROM rm_places WHERE place_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("load places: %w", err)
	}
	var (
		id       string
		row, doc []byte
		updated  time.Time
		town     string
		lat, lng *float64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &row, &doc, &updated, &town, &lat, &lng}, func() error {
		if row == nil {
			v, err := renderDoc(doc, updated, s.now())
			if err != nil {
				return err
			}
			row = v.Row
		}
		st := storedRow{row: s.appendRow(nil, id, row), town: town}
		if lat != nil && lng != nil {
			st.at, st.located = placeindex.GeoPoint{Lat: *lat, Lng: *lng}, true
		}
		out[id] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load places: %w", err)
	}
	return out, nil
}

// appendRow appends a place's stored row and its canonical_url value to dst.
func (s *Server) appendRow(dst []byte, id string, row []byte) []byte {
	url, _ := json.Marshal(domain.CanonicalURL(s.CanonicalBaseURL, id)) // a string always marshals
	return append(append(dst, row...), url...)
}

// placeSummary is what related places and trending show of a place, read from columns.
type placeSummary struct {
	PlaceID  string
	Name     string
	Category string
	TownSlug *string
	Rating   *float64
}

// loadSummaries reads the summaries of the places with the given ids, keyed by id.
func (s *Server) loadSummaries(ctx context.Context, ids []string) (map[string]placeSummary, error) {
	out := make(map[string]placeSummary, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.Pool.Query(ctx, `SELECT place_id, name, category, town_slug, rating FROM rm_places WHERE place_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("load places: %w", err)
	}
	var p placeSummary
	_, err = pgx.ForEachRow(rows, []any{&p.PlaceID, &p.Name, &p.Category, &p.TownSlug, &p.Rating}, func() error {
		out[p.PlaceID] = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load places: %w", err)
	}
	return out, nil
}

// relatedItem is one row of the related-places payload (docs/api.md, "Places"; RelatedItem in
// openapi/openapi.json).
type relatedItem struct {
	PlaceID    string   `json:"place_id"`
	Name       string   `json:"name"`
	Category   string   `json:"category"`
	TownSlug   *string  `json:"town_slug"`
	DistanceKm float64  `json:"distance_km"`
	Rating     *float64 `json:"rating"`
	Reason     string   `json:"reason"`
}

// trendingItem is one row of the trending payload (docs/api.md, "Trending and hidden gems";
// TrendingItem in openapi/openapi.json).
type trendingItem struct {
	PlaceID    string  `json:"place_id"`
	Name       string  `json:"name"`
	Category   string  `json:"category"`
	TownSlug   *string `json:"town_slug"`
	Score      float64 `json:"score"`
	Requests7d int64   `json:"requests_7d"`
}

// hiddenGem is one row of the hidden-gems payload (docs/api.md, "Trending and hidden gems";
// HiddenGemItem in openapi/openapi.json).
type hiddenGem struct {
	PlaceID       string   `json:"place_id"`
	Name          string   `json:"name"`
	Category      string   `json:"category"`
	TownSlug      *string  `json:"town_slug"`
	LocalGemScore *float64 `json:"local_gem_score"`
	Rating        *float64 `json:"rating"`
	RatingCount   *int     `json:"rating_count"`
}
