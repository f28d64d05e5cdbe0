// Package placeindex defines the place index: the read model that answers the
// read API's place list (town prefix and full-text q) and geo search (radius
// around a point, nearest first). It is a projection of catalog events; the
// adapters in bleveindex (embedded) and elasticindex (Elasticsearch) implement
// Index, and placeindextest holds the contract suite both must pass.
package placeindex

import (
	"context"
	"math"
	"slices"
	"sort"
	"strings"
	"unicode"

	"github.com/blevesearch/bleve/v2/analysis/char/asciifolding"
)

// EarthRadiusKm is the mean earth radius used for every distance the index
// reports, so that the read API and the adapters agree to the millimetre.
const EarthRadiusKm = 6371.0088

// AnywhereKm is a radius that holds the whole Earth (no two points on it are more than half
// its circumference apart): Near with it finds the nearest matches wherever they are.
const AnywhereKm = 2 * math.Pi * EarthRadiusKm

// DefaultLimit is the page size used when a query leaves Limit at zero.
const DefaultLimit = 20

// GeoPoint is a WGS84 coordinate in degrees.
type GeoPoint struct{ Lat, Lng float64 }

// Doc is everything the index needs to know about one place.
type Doc struct {
	PlaceID     string
	Name        string
	Category    string // namespaced, e.g. "food.restaurant.bbq"
	Description string
	TownSlug    string    // may be ""
	Location    *GeoPoint // nil when the place has no coordinates (never matches geo search)
	RatingCount int
	// Version is the place stream's version the document was made from. An upsert never
	// replaces a document of a higher version: imports that commit out of version order
	// (a transaction that took its id first, then waited for a head lock) reach the index
	// newest first, and must not end on the older one. 0 is no version: always applied.
	Version int64
}

// ListQuery selects places for the place list.
type ListQuery struct {
	TownPrefix    string // canonical slug prefix ("" = any town); matches TownSlug by prefix
	Q             string // full text: "" = no text filter
	Limit, Offset int
}

// GeoQuery selects places within a radius of a point.
type GeoQuery struct {
	Center         GeoPoint
	RadiusKm       float64
	CategoryPrefix string // "" = any (unless ByCategory); else Category must equal it or start with CategoryPrefix+"."
	// ByCategory applies CategoryPrefix even when it is "": the top level of a category such as
	// ".misc" (related places share it) is "", which only categories starting with "." have.
	ByCategory    bool
	ExcludeID     string // place to leave out ("" = none)
	Limit, Offset int
}

// Hit is one matching place.
type Hit struct {
	PlaceID    string
	DistanceKm float64 // only set by Near
}

// Result is one page of matches.
type Result struct {
	Hits  []Hit
	Total int // all matches before limit/offset
}

// Index is the place index. Implementations are safe for concurrent use.
type Index interface {
	// Upsert writes docs and deletes ids, and stores checkpoint with them
	// (atomically where the backend allows; re-applying the same batch must be harmless).
	Upsert(ctx context.Context, docs []Doc, deleteIDs []string, checkpoint string) error
	// Checkpoint returns the checkpoint stored by the last Upsert; "" when empty/new.
	Checkpoint(ctx context.Context) (string, error)
	// List answers the place list: with Q ordered by relevance (ties: PlaceID),
	// without Q by RatingCount desc then PlaceID.
	List(ctx context.Context, q ListQuery) (Result, error)
	// Near answers geo search: places within RadiusKm of Center, nearest first
	// (ties: PlaceID), each with its exact haversine DistanceKm.
	Near(ctx context.Context, q GeoQuery) (Result, error)
	// Rebuild fills a brand-new generation of the index through fill and then
	// swaps it in atomically; readers see the old generation until the swap,
	// never a half-built one. Upserts to the live index while fill runs are not
	// carried over: fill must write everything up to the checkpoint it stores.
	Rebuild(ctx context.Context, fill func(w Writer) error) error
	Close() error
}

// Writer receives the documents of a generation being rebuilt.
type Writer interface {
	Upsert(ctx context.Context, docs []Doc, deleteIDs []string, checkpoint string) error
}

// DistanceKm is the great-circle (haversine) distance between a and b in km.
func DistanceKm(a, b GeoPoint) float64 {
	const rad = math.Pi / 180
	lat1, lat2 := a.Lat*rad, b.Lat*rad
	dLat := lat2 - lat1
	dLng := (b.Lng - a.Lng) * rad
	h := math.Sin(dLat/2)*math.Sin(dLat/2) + math.Cos(lat1)*math.Cos(lat2)*math.Sin(dLng/2)*math.Sin(dLng/2)
	// Rounding can push h a hair above 1 for antipodal points; Asin would return NaN.
	h = math.Min(1, math.Max(0, h))
	return 2 * EarthRadiusKm * math.Asin(math.Sqrt(h))
}

// TopLevel is a category's top level, the part before its first ".": every category a
// GeoQuery's category holds (GeoQuery.Matches) has the top level of the query's.
func TopLevel(category string) string {
	top, _, _ := strings.Cut(category, ".")
	return top
}

// CategoryMatches reports whether category is prefix itself or lies below it
// in the namespace: "food" matches "food" and "food.restaurant", never "foodtruck".
func CategoryMatches(category, prefix string) bool {
	return prefix == "" || CategoryWithin(category, prefix)
}

// CategoryWithin reports whether category is prefix itself or lies below it in the namespace,
// "" included: "" holds "" and ".misc", never "food".
func CategoryWithin(category, prefix string) bool {
	return category == prefix || strings.HasPrefix(category, prefix) && category[len(prefix)] == '.'
}

// Matches reports whether a place of category is in q's category.
func (q GeoQuery) Matches(category string) bool {
	if q.ByCategory {
		return CategoryWithin(category, q.CategoryPrefix)
	}
	return CategoryMatches(category, q.CategoryPrefix)
}

// Page returns the effective limit and offset: DefaultLimit for a zero or
// negative limit, zero for a negative offset.
func Page(limit, offset int) (int, int) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return limit, max(offset, 0)
}

// Words splits a full-text query into the lowercase words that must each
// prefix some token of a matching place. Anything but letters and digits
// separates words, so "food.restaurant" and "Bar-B-Q" split as indexed.
func Words(q string) []string {
	return strings.FieldsFunc(strings.ToLower(q), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	})
}

// DistinctWords is Words with each word once, in the order of its first appearance: a word
// given twice asks nothing more of a place, and each word is a clause every place must match.
func DistinctWords(q string) []string {
	words := Words(q)
	seen := make(map[string]bool, len(words))
	return slices.DeleteFunc(words, func(w string) bool {
		if seen[w] {
			return true
		}
		seen[w] = true
		return false
	})
}

var folding = asciifolding.New()

// FoldedWords is a word of q as both indexes analyse it: folded to ASCII (the embedded index's
// port of Lucene's ASCIIFoldingFilter, the filter Elasticsearch's asciifolding runs), then
// split into runs of letters and digits, lower-cased. A word whose folding holds other
// characters is several: "a⑽b" folds to "a(10)b", the words a, 10 and b.
func FoldedWords(word string) []string {
	return Words(string(folding.Filter([]byte(word))))
}

// Clauses is the number of different folded words of words (DistinctWords of a q): the
// clauses an index asks every place to match, which the read API bounds (docs/limits.md).
func Clauses(words []string) int {
	seen := map[string]bool{}
	for _, w := range words {
		for _, f := range FoldedWords(w) {
			seen[f] = true
		}
	}
	return len(seen)
}

// SortHitsByDistance orders hits nearest first, ties by PlaceID.
func SortHitsByDistance(hits []Hit) {
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].DistanceKm != hits[j].DistanceKm {
			return hits[i].DistanceKm < hits[j].DistanceKm
		}
		return hits[i].PlaceID < hits[j].PlaceID
	})
}
