package readapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// Paging bounds of the place list and geo search (docs/limits.md, "Read API", query
// parameters).
const (
	defaultPageLimit = 20
	maxPageLimit     = 100
	maxOffset        = 10000
)

// Geo search bounds (docs/limits.md, "Read API", query parameters).
const (
	defaultRadiusKm = 5
	maxRadiusKm     = 50
)

// Related places: the nearest of the same top-level category at any distance, at most
// relatedLimit. They are looked for within relatedNearKm first (a few hundred cells of the
// embedded index), and over the whole Earth only when fewer are found there: the nearest
// relatedLimit within a radius are the nearest anywhere once there are that many.
const (
	relatedNearKm = 50
	relatedLimit  = 10
)

// maxQueryWords bounds the different words of a place list's q (docs/limits.md).
const maxQueryWords = 16

// listPlaces answers GET /api/data/places: town AND q, paid per row.
func (s *Server) listPlaces(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultPageLimit, 1, maxPageLimit)
	if err != nil {
		return err
	}
	offset, err := intParam(q, "offset", 0, 0, maxOffset)
	if err != nil {
		return err
	}
	text := strings.TrimSpace(q.Get("q"))
	words := placeindex.DistinctWords(text)
	if len(words) > maxQueryWords || placeindex.Clauses(words) > maxQueryWords {
		// Each word is a clause every place must match: a q of 60 short words cost a second of
		// CPU, and nothing when it matched nothing. Counted as the indexes fold them too: one
		// word of symbols that fold to letters ("aa⑴ab⑴...") is many.
		return httpx.BadParam("q", "must hold at most %d different words (counted once folded to ASCII: \"a⑽b\" is a, 10 and b)", maxQueryWords)
	}
	town := ResolveTown(q.Get("town"))
	if text != "" && len(words) == 0 || town == unmatchableTown {
		// A q with no word ("!!!") matches no place; dropped, it would list (and charge)
		// the whole catalog. A town no slug can match matches no place either: no search.
		return s.servePlaceRows(w, r, c, domain.OpPlaceList, nil, asked{})
	}
	res, err := s.Index.List(r.Context(), placeindex.ListQuery{
		TownPrefix: town,
		Q:          text,
		Limit:      limit,
		Offset:     offset,
	})
	if err != nil {
		return fmt.Errorf("place list: %w", err)
	}
	return s.servePlaceRows(w, r, c, domain.OpPlaceList, res.Hits, asked{townPrefix: town})
}

// searchPlaces answers GET /api/data/search: places within radius of a point, nearest
// first, paid per row.
func (s *Server) searchPlaces(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	lat, err := floatParam(q, "lat", true, 0, -90, 90, false)
	if err != nil {
		return err
	}
	lng, err := floatParam(q, "lng", true, 0, -180, 180, false)
	if err != nil {
		return err
	}
	radius, err := floatParam(q, "radius", false, defaultRadiusKm, 0, maxRadiusKm, true)
	if err != nil {
		return err
	}
	limit, err := intParam(q, "limit", defaultPageLimit, 1, maxPageLimit)
	if err != nil {
		return err
	}
	offset, err := intParam(q, "offset", 0, 0, maxOffset)
	if err != nil {
		return err
	}
	center := placeindex.GeoPoint{Lat: lat, Lng: lng}
	res, err := s.Index.Near(r.Context(), placeindex.GeoQuery{
		Center:   center,
		RadiusKm: radius,
		Limit:    limit,
		Offset:   offset,
	})
	if err != nil {
		return fmt.Errorf("geo search: %w", err)
	}
	return s.servePlaceRows(w, r, c, domain.OpSearch, res.Hits, asked{center: &center})
}

// asked is what a place list or geo search asked of its places that their rows tell: the place
// list's town, a geo search's centre.
type asked struct {
	townPrefix string               // "" = any town
	center     *placeindex.GeoPoint // nil but on a geo search, whose rows carry their distance_km
}

// servePlaceRows loads the hits' places in hit order and serves them per row. A hit the
// read model does not (yet) hold is left out, unpaid, and so is one whose row is not what was
// asked (another town, not where the index found the place): the index and the catalog read
// model are projected apart, and while one of them holds a newer version of a place that
// moved, its row would be served (and charged) in a town, or at a distance, it is not at.
func (s *Server) servePlaceRows(w http.ResponseWriter, r *http.Request, c caller, op domain.Operation, hits []placeindex.Hit, a asked) error {
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.PlaceID
	}
	stored, err := s.loadRows(r.Context(), ids)
	if err != nil {
		return err
	}
	rows := make([]rawJSON, 0, len(hits))
	resources := make([]string, 0, len(hits))
	for _, h := range hits {
		st, ok := stored[h.PlaceID]
		if !ok || !strings.HasPrefix(st.town, a.townPrefix) {
			continue
		}
		row := slices.Clip(st.row) // what follows is this hit's own, should a place come twice
		if a.center != nil {
			if !st.located || math.Abs(placeindex.DistanceKm(*a.center, st.at)-h.DistanceKm) > movedKm {
				continue
			}
			d, _ := json.Marshal(h.DistanceKm) // as the encoder writes a float64
			row = append(append(row, `,"distance_km":`...), d...)
		}
		rows = append(rows, append(row, '}'))
		resources = append(resources, domain.PlaceResource(h.PlaceID))
	}
	return serveRows(s, w, r, c, op, resources, rows)
}

// movedKm is how far a geo search row's distance, from the coordinates the read model holds,
// may be from the distance the index found: both indexes compute it from the place's exact
// coordinates (placeindex.DistanceKm), so a row of the version the index holds is at exactly
// that distance, and one farther off is of another version.
const movedKm = 1e-6

// placeDetail answers GET /api/data/places/{placeId}.
func (s *Server) placeDetail(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := placeIDOf(r)
	if err != nil {
		return err
	}
	detail, ok, err := s.loadDetail(r.Context(), id)
	if err != nil {
		return err
	}
	if !ok {
		return errPlaceNotFound(id)
	}
	return s.serveObject(w, r, c, domain.OpPlaceDetail, domain.PlaceResource(id), detail)
}

// placeMenu answers GET /api/data/places/{placeId}/menu.
func (s *Server) placeMenu(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := placeIDOf(r)
	if err != nil {
		return err
	}
	menu, items, ok, err := s.loadMenu(r.Context(), id)
	if err != nil {
		return err
	}
	if !ok {
		return errPlaceNotFound(id)
	}
	if menu == nil {
		return &notFoundError{codeNoMenuData, "place " + id + " has no menu data"}
	}
	return s.serveFixed(w, r, c, domain.OpPlaceMenu, domain.MenuResource(id), menu, &items)
}

// placeReviews answers GET /api/data/places/{placeId}/reviews.
func (s *Server) placeReviews(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := placeIDOf(r)
	if err != nil {
		return err
	}
	summary, ok, err := s.loadReviews(r.Context(), id)
	if err != nil {
		return err
	}
	if !ok {
		return errPlaceNotFound(id)
	}
	if summary == nil {
		return &notFoundError{codeNoReviewData, "place " + id + " has no review summary"}
	}
	return s.serveObject(w, r, c, domain.OpReviews, domain.ReviewsResource(id), summary)
}

// placeIDOf is the route's place id. An id no catalog record can have (not UTF-8, or
// holding a NUL, which PostgreSQL text cannot store) is a place not found, answered
// without a lookup.
func placeIDOf(r *http.Request) (string, error) {
	id, _ := placeIDVar(r)
	if !utf8.ValidString(id) || strings.IndexByte(id, 0) >= 0 {
		return id, errPlaceNotFound(id)
	}
	return id, nil
}

// relatedPlaces answers GET /api/data/places/{placeId}/related: the nearest other places of
// the same top-level category, at any distance, nearest first. A place without coordinates
// has no neighbours; the answer is an empty list, charged like any other.
func (s *Server) relatedPlaces(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := placeIDOf(r)
	if err != nil {
		return err
	}
	var (
		category string
		lat, lng *float64
	)
	err = s.Pool.QueryRow(r.Context(), `SELECT category, latitude, longitude FROM rm_places WHERE place_id = $1`, id).
		Scan(&category, &lat, &lng)
	if errors.Is(err, pgx.ErrNoRows) {
		return errPlaceNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("related places: %w", err)
	}
	items := []relatedItem{}
	if lat != nil && lng != nil {
		top := placeindex.TopLevel(category)
		var res placeindex.Result
		for _, radius := range []float64{relatedNearKm, placeindex.AnywhereKm} {
			res, err = s.Index.Near(r.Context(), placeindex.GeoQuery{
				Center:         placeindex.GeoPoint{Lat: *lat, Lng: *lng},
				RadiusKm:       radius,
				CategoryPrefix: top,
				ByCategory:     true, // a top level of "" (a category starting with ".") is one too
				ExcludeID:      id,
				Limit:          relatedLimit,
			})
			if err != nil {
				return fmt.Errorf("related places: %w", err)
			}
			if len(res.Hits) >= relatedLimit {
				break
			}
		}
		ids := make([]string, len(res.Hits))
		for i, h := range res.Hits {
			ids[i] = h.PlaceID
		}
		places, err := s.loadSummaries(r.Context(), ids)
		if err != nil {
			return err
		}
		for _, h := range res.Hits {
			n, ok := places[h.PlaceID]
			if !ok {
				continue
			}
			items = append(items, relatedItem{
				PlaceID: n.PlaceID, Name: n.Name, Category: n.Category, TownSlug: n.TownSlug,
				DistanceKm: h.DistanceKm, Rating: n.Rating,
				Reason: fmt.Sprintf("same category, %.1f km away", h.DistanceKm),
			})
		}
	}
	return serveList(s, w, r, c, domain.OpRelated, domain.RelatedResource(id), items)
}
