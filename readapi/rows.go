package readapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
)

// placeRecord is a place as the catalog read model holds it.
type placeRecord struct {
	domain.Place
	UpdatedAt time.Time // when the import that wrote it was recorded
}

// loadPlace reads one place; ok is false when there is none.
func (s *Server) loadPlace(ctx context.Context, id string) (p placeRecord, ok bool, err error) {
	var doc []byte
	err = s.Pool.QueryRow(ctx, `SELECT doc, updated_at FROM rm_places WHERE place_id = $1`, id).Scan(&doc, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("load place: %w", err)
	}
	if err := json.Unmarshal(doc, &p.Place); err != nil {
		return p, false, fmt.Errorf("load place %s: %w", id, err)
	}
	return p, true, nil
}

// loadPlaces reads the places with the given ids, keyed by id; ids without a row are
// missing from the map.
func (s *Server) loadPlaces(ctx context.Context, ids []string) (map[string]domain.Place, error) {
	out := make(map[string]domain.Place, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.Pool.Query(ctx, `SELECT doc FROM rm_places WHERE place_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("load places: %w", err)
	}
	var doc []byte
	_, err = pgx.ForEachRow(rows, []any{&doc}, func() error {
		var p domain.Place
		if err := json.Unmarshal(doc, &p); err != nil {
			return err
		}
		out[p.PlaceID] = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load places: %w", err)
	}
	return out, nil
}

// placeRow is a place as list and search rows show it: every Place field of the spec,
// nullable ones as explicit null, without the detail-only fields.
type placeRow struct {
	PlaceID        string   `json:"place_id"`
	Name           string   `json:"name"`
	Category       string   `json:"category"`
	Address        string   `json:"address,omitempty"`
	TownSlug       *string  `json:"town_slug"`
	Latitude       *float64 `json:"latitude"`
	Longitude      *float64 `json:"longitude"`
	IsGem          bool     `json:"is_gem"`
	LocalGemScore  *float64 `json:"local_gem_score"`
	Phone          *string  `json:"phone"`
	Website        *string  `json:"website"`
	Rating         *float64 `json:"rating"`
	RatingCount    *int     `json:"rating_count"`
	SEODescription *string  `json:"seo_description"`
	CanonicalURL   string   `json:"canonical_url"`
	// DistanceKm is set on geo search rows only.
	DistanceKm *float64 `json:"distance_km,omitempty"`
}

// placeDetail is the place detail payload (decisions §1).
type placeDetail struct {
	placeRow
	Hours          *hours                        `json:"hours"`
	Description    *string                       `json:"description"`
	EnrichmentTier string                        `json:"enrichment_tier"`
	FieldTrust     map[string]*domain.FieldTrust `json:"field_trust"`
}

// hours is domain.Hours with every day present: a closed day is [], never null.
type hours struct {
	Mon []domain.TimeRange `json:"mon"`
	Tue []domain.TimeRange `json:"tue"`
	Wed []domain.TimeRange `json:"wed"`
	Thu []domain.TimeRange `json:"thu"`
	Fri []domain.TimeRange `json:"fri"`
	Sat []domain.TimeRange `json:"sat"`
	Sun []domain.TimeRange `json:"sun"`
}

func (s *Server) placeRow(p domain.Place) placeRow {
	return placeRow{
		PlaceID: p.PlaceID, Name: p.Name, Category: p.Category, Address: p.Address,
		TownSlug: p.TownSlug, Latitude: p.Latitude, Longitude: p.Longitude,
		IsGem: p.IsGem, LocalGemScore: p.LocalGemScore, Phone: p.Phone, Website: p.Website,
		Rating: p.Rating, RatingCount: p.RatingCount, SEODescription: p.SEODescription,
		CanonicalURL: domain.CanonicalURL(s.CanonicalBaseURL, p.PlaceID),
	}
}

func (s *Server) detail(p domain.Place, now time.Time) placeDetail {
	d := placeDetail{
		placeRow:       s.placeRow(p),
		Description:    p.Description,
		EnrichmentTier: p.EnrichmentTier,
		FieldTrust:     domain.PlaceFieldTrust(p, now),
	}
	if h := p.Hours; h != nil {
		d.Hours = &hours{Mon: days(h.Mon), Tue: days(h.Tue), Wed: days(h.Wed), Thu: days(h.Thu),
			Fri: days(h.Fri), Sat: days(h.Sat), Sun: days(h.Sun)}
	}
	return d
}

func days(r []domain.TimeRange) []domain.TimeRange {
	if r == nil {
		return []domain.TimeRange{}
	}
	return r
}

// reviewSummary is the review payload; generated_at is always a time.
type reviewSummary struct {
	PlaceID     string    `json:"place_id"`
	Headline    string    `json:"headline"`
	Summary     string    `json:"summary"`
	Confidence  float64   `json:"confidence"`
	ReviewCount int       `json:"review_count"`
	GeneratedAt time.Time `json:"generated_at"`
}

// relatedItem is one row of the related-places payload (decisions §1).
type relatedItem struct {
	PlaceID    string   `json:"place_id"`
	Name       string   `json:"name"`
	Category   string   `json:"category"`
	TownSlug   *string  `json:"town_slug"`
	DistanceKm float64  `json:"distance_km"`
	Rating     *float64 `json:"rating"`
	Reason     string   `json:"reason"`
}

// trendingItem is one row of the trending payload (decisions §1).
type trendingItem struct {
	PlaceID    string  `json:"place_id"`
	Name       string  `json:"name"`
	Category   string  `json:"category"`
	TownSlug   *string `json:"town_slug"`
	Score      float64 `json:"score"`
	Requests7d int64   `json:"requests_7d"`
}

// hiddenGem is one row of the hidden-gems payload (decisions §1).
type hiddenGem struct {
	PlaceID       string   `json:"place_id"`
	Name          string   `json:"name"`
	Category      string   `json:"category"`
	TownSlug      *string  `json:"town_slug"`
	LocalGemScore *float64 `json:"local_gem_score"`
	Rating        *float64 `json:"rating"`
	RatingCount   *int     `json:"rating_count"`
}
