package domain

import (
	"fmt"
	"strings"
	"time"
)

// Day is the UTC calendar day that bounds deduplication, as YYYY-MM-DD.
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Resource identities for deduplication (docs/api.md, "Deduplication"). A place is one
// resource whether it was paid as a list row, a search row or a detail.
func PlaceResource(id string) string   { return "place:" + id }
func MenuResource(id string) string    { return "menu:" + id }
func ReviewsResource(id string) string { return "reviews:" + id }
func RelatedResource(id string) string { return "related:" + id }

const (
	TrendingResource = "trending"
	TownsResource    = "towns"
)

func HiddenGemsResource(townSlug string, limit int) string {
	return fmt.Sprintf("hidden-gems?town=%s&limit=%d", townSlug, limit)
}

func EventsResource(townSlug, from, to string) string {
	return fmt.Sprintf("events?town=%s&from=%s&to=%s", townSlug, from, to)
}

// PlaceOfResource returns the place id a place-scoped resource is about, or "".
func PlaceOfResource(resource string) string {
	for _, p := range []string{"place:", "menu:", "reviews:", "related:"} {
		if strings.HasPrefix(resource, p) {
			return resource[len(p):]
		}
	}
	return ""
}
