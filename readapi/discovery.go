package readapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// Trending: at most this many places, ranked over this many days up to and including today.
const (
	trendingLimit = 20
	trendingDays  = 7
)

// Hidden gems (docs/api.md, "Trending and hidden gems"): limit bounds (docs/limits.md, "Read
// API"), and the local_gem_score that makes a gem of a place the import does not mark is_gem.
const (
	defaultGemsLimit = 10
	maxGemsLimit     = 50
	gemScoreAtLeast  = 0.7
)

// trending answers GET /api/data/trending: places ranked by metered requests over the
// trailing 7 days (today included); places without usage follow by catalog popularity
// (rating_count), which alone orders them before there is any usage. score is the
// requests of the window.
func (s *Server) trending(w http.ResponseWriter, r *http.Request, c caller) error {
	ctx := r.Context()
	if s.UsageSettled != nil {
		// Bounded: a usage projection held back delays the answer, never withholds it.
		_ = s.UsageSettled(ctx)
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT p.place_id, p.name, p.category, p.town_slug, u.requests
		FROM (SELECT place_id, sum(requests)::bigint AS requests FROM rm_usage_daily
			WHERE day > $1::date - $2::int AND day <= $1::date GROUP BY place_id) u
		JOIN rm_places p USING (place_id)
		WHERE u.requests > 0
		ORDER BY u.requests DESC, p.rating_count DESC NULLS LAST, p.place_id COLLATE "C"
		LIMIT $3`, domain.Day(s.now()), trendingDays, trendingLimit)
	if err != nil {
		return fmt.Errorf("trending: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (trendingItem, error) {
		var it trendingItem
		err := row.Scan(&it.PlaceID, &it.Name, &it.Category, &it.TownSlug, &it.Requests7d)
		it.Score = float64(it.Requests7d)
		return it, err
	})
	if err != nil {
		return fmt.Errorf("trending: %w", err)
	}
	if len(items) < trendingLimit {
		if items, err = s.fillByPopularity(r, items); err != nil {
			return err
		}
	}
	return serveList(s, w, r, c, domain.OpTrending, domain.TrendingResource, items)
}

// fillByPopularity tops items up to trendingLimit with the most rated places not in it,
// in the place index's popularity order (rating_count desc, then place_id).
func (s *Server) fillByPopularity(r *http.Request, items []trendingItem) ([]trendingItem, error) {
	res, err := s.Index.List(r.Context(), placeindex.ListQuery{Limit: trendingLimit + len(items)})
	if err != nil {
		return nil, fmt.Errorf("trending: %w", err)
	}
	ids := make([]string, 0, len(res.Hits))
	for _, h := range res.Hits {
		if !slices.ContainsFunc(items, func(it trendingItem) bool { return it.PlaceID == h.PlaceID }) {
			ids = append(ids, h.PlaceID)
		}
	}
	places, err := s.loadSummaries(r.Context(), ids)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		p, ok := places[id]
		if !ok || len(items) == trendingLimit {
			continue
		}
		items = append(items, trendingItem{PlaceID: p.PlaceID, Name: p.Name, Category: p.Category, TownSlug: p.TownSlug})
	}
	return items, nil
}

// hiddenGems answers GET /api/data/hidden-gems: gems that are not chains, best
// local_gem_score first. Chains are flagged by the catalog projection (marked is_chain, or
// a normalized name shared by domain.ChainThreshold or more places).
func (s *Server) hiddenGems(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	town := ResolveTown(q.Get("town"))
	limit, err := intParam(q, "limit", defaultGemsLimit, 1, maxGemsLimit)
	if err != nil {
		return err
	}
	rows, err := s.Pool.Query(r.Context(), `
		SELECT place_id, name, category, town_slug, local_gem_score, rating, rating_count
		FROM rm_places
		WHERE (is_gem OR local_gem_score >= $1) AND NOT is_chain
		  AND ($2 = '' OR town_slug LIKE $2 || '%')
		ORDER BY local_gem_score DESC NULLS LAST, rating_count DESC NULLS LAST, place_id COLLATE "C"
		LIMIT $3`, gemScoreAtLeast, likePrefix(town), limit)
	if err != nil {
		return fmt.Errorf("hidden gems: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hiddenGem, error) {
		var g hiddenGem
		err := row.Scan(&g.PlaceID, &g.Name, &g.Category, &g.TownSlug, &g.LocalGemScore, &g.Rating, &g.RatingCount)
		return g, err
	})
	if err != nil {
		return fmt.Errorf("hidden gems: %w", err)
	}
	return serveList(s, w, r, c, domain.OpHiddenGems, domain.HiddenGemsResource(town, limit), items)
}

// likePrefix escapes s for use as a LIKE prefix.
func likePrefix(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
