package domain

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// Day is the UTC calendar day that bounds deduplication, as YYYY-MM-DD.
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// ResourceHash is the key of a resource's dedup claim: the first 8 bytes of the SHA-256 of its
// identity (PlaceResource and friends), as a signed big-endian integer — the SQL function
// kyapi_resource_hash computes the same. A claim is then 8 bytes whatever the resource's
// identity (a parameterized list's is as long as its parameters). Two resources of one account
// sharing a hash on one day (odds of about 1 in 10^10 even at a million claims a day) would
// make the second one free: never a charge the client did not owe.
func ResourceHash(resource string) int64 {
	sum := sha256.Sum256([]byte(resource))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

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
