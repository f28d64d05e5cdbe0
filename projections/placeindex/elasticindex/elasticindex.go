// Package elasticindex is the place index on Elasticsearch 8.x.
//
// Reads go through an alias (the index prefix, e.g. "places") that points at
// one concrete generation ("places-1", "places-2", ...). Rebuild fills the
// next generation, refreshes it and moves the alias in one update-aliases
// call, so readers switch from one complete generation to the next. Each
// generation's checkpoint is a document, keyed by the concrete index name, in
// "<prefix>-checkpoint".
package elasticindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/typedapi/core/bulk"
	"github.com/elastic/go-elasticsearch/v8/typedapi/core/search"
	"github.com/elastic/go-elasticsearch/v8/typedapi/indices/updatealiases"
	"github.com/elastic/go-elasticsearch/v8/typedapi/types"
	"github.com/elastic/go-elasticsearch/v8/typedapi/types/enums/distanceunit"
	"github.com/elastic/go-elasticsearch/v8/typedapi/types/enums/geodistancetype"
	"github.com/elastic/go-elasticsearch/v8/typedapi/types/enums/operator"
	"github.com/elastic/go-elasticsearch/v8/typedapi/types/enums/refresh"
	"github.com/elastic/go-elasticsearch/v8/typedapi/types/enums/sortorder"
	"github.com/elastic/go-elasticsearch/v8/typedapi/types/enums/versiontype"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// ErrClosed is returned by every method called after Close.
var ErrClosed = errors.New("elasticindex: index is closed")

var _ placeindex.Index = (*Index)(nil)

// Index is the place index on Elasticsearch. It is safe for concurrent use;
// one process should own the writes to a given prefix.
type Index struct {
	es              *elasticsearch.TypedClient
	alias           string // what readers query
	checkpointIndex string

	rebuildMu sync.Mutex // one Rebuild at a time

	mu      sync.RWMutex
	current string // concrete index the alias points at; "" once closed
}

// source is a place as stored in Elasticsearch.
type source struct {
	PlaceID     string    `json:"place_id"`
	Name        string    `json:"name"`
	Category    string    `json:"category"`
	Description string    `json:"description"`
	TownSlug    string    `json:"town_slug,omitempty"`
	Location    *location `json:"location,omitempty"`
	RatingCount int       `json:"rating_count"`
}

type location struct {
	Lat float64 `json:"lat"`
	Lon float64 `json:"lon"`
}

type checkpointDoc struct {
	Checkpoint string `json:"checkpoint"`
}

// Open connects to the Elasticsearch at url and opens the place index named
// indexPrefix, creating its first generation and checkpoint index when absent.
func Open(ctx context.Context, url string, indexPrefix string) (*Index, error) {
	if indexPrefix == "" || strings.ToLower(indexPrefix) != indexPrefix {
		return nil, fmt.Errorf("elasticindex: index prefix %q must be non-empty lowercase", indexPrefix)
	}
	es, err := elasticsearch.NewTypedClient(elasticsearch.Config{Addresses: []string{url}})
	if err != nil {
		return nil, fmt.Errorf("elasticindex: client: %w", err)
	}
	x := &Index{es: es, alias: indexPrefix, checkpointIndex: indexPrefix + "-checkpoint"}

	exists, err := es.Indices.Exists(x.checkpointIndex).Do(ctx)
	if err != nil {
		return nil, fmt.Errorf("elasticindex: checking %s: %w", x.checkpointIndex, err)
	}
	if !exists {
		if err := x.createIndex(ctx, x.checkpointIndex, checkpointIndexBody); err != nil && !isAlreadyExists(err) {
			return nil, err
		}
	}

	current, err := x.resolveAlias(ctx)
	if err != nil {
		return nil, err
	}
	if current == "" {
		current = x.generation(1)
		// No alias means no generation was ever live: anything left under
		// the first name is from an interrupted Open and safe to drop.
		if err := x.deleteIndex(ctx, current); err != nil {
			return nil, err
		}
		if err := x.createIndex(ctx, current, indexBody); err != nil {
			return nil, err
		}
		if err := x.pointAlias(ctx, "", current); err != nil {
			return nil, err
		}
	}
	x.current = current
	return x, nil
}

// Prefix is the index prefix, which is also the alias readers query.
func (x *Index) Prefix() string { return x.alias }

// Close stops the index from being used. The client holds no resources that
// need releasing beyond idle HTTP connections.
func (x *Index) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.current = ""
	return nil
}

// Drop deletes every index this prefix owns: all generations and the
// checkpoint index. It is for tests and operators retiring an index.
func (x *Index) Drop(ctx context.Context) error {
	res, err := x.es.Indices.Get(x.alias + "-*").Do(ctx)
	if err != nil {
		return fmt.Errorf("elasticindex: listing %s-*: %w", x.alias, err)
	}
	var errs []error
	for name := range res {
		errs = append(errs, x.deleteIndex(ctx, name))
	}
	return errors.Join(errs...)
}

func (x *Index) live() (string, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.current == "" {
		return "", ErrClosed
	}
	return x.current, nil
}

// Upsert implements placeindex.Index. Documents are visible to List and
// Near when it returns. The checkpoint is written only after every document
// operation succeeded, so a failed batch is replayed rather than skipped.
func (x *Index) Upsert(ctx context.Context, docs []placeindex.Doc, deleteIDs []string, checkpoint string) error {
	current, err := x.live()
	if err != nil {
		return err
	}
	return x.write(ctx, current, docs, deleteIDs, checkpoint, true)
}

// write applies one batch to the concrete index, deletes after docs, then
// stores its checkpoint.
func (x *Index) write(ctx context.Context, index string, docs []placeindex.Doc, deleteIDs []string, checkpoint string, visible bool) error {
	if len(docs)+len(deleteIDs) > 0 {
		req := x.es.Bulk().Index(index)
		if visible {
			req.Refresh(refresh.Waitfor)
		}
		for _, d := range docs {
			if d.PlaceID == "" {
				return errors.New("elasticindex: upsert: doc without PlaceID")
			}
			op := types.IndexOperation{Id_: &d.PlaceID}
			if d.Version > 0 {
				// The stream's version as the document's: Elasticsearch keeps the newer one.
				op.Version, op.VersionType = &d.Version, &versiontype.Externalgte
			}
			if err := req.IndexOp(op, toSource(d)); err != nil {
				return fmt.Errorf("elasticindex: upsert %s: %w", d.PlaceID, err)
			}
		}
		for _, id := range deleteIDs {
			if err := req.DeleteOp(types.DeleteOperation{Id_: &id}); err != nil {
				return fmt.Errorf("elasticindex: delete %s: %w", id, err)
			}
		}
		res, err := req.Do(ctx)
		if err != nil {
			return fmt.Errorf("elasticindex: bulk into %s: %w", index, err)
		}
		if err := bulkError(res); err != nil {
			return fmt.Errorf("elasticindex: bulk into %s: %w", index, err)
		}
	}
	_, err := x.es.Index(x.checkpointIndex).Id(index).Document(checkpointDoc{Checkpoint: checkpoint}).Do(ctx)
	if err != nil {
		return fmt.Errorf("elasticindex: storing checkpoint of %s: %w", index, err)
	}
	return nil
}

// bulkError reports the first failed item. Deleting a missing place is not a
// failure, since re-applying a batch must be harmless; nor is a version conflict
// on indexing, which means the index already holds a newer version of the place.
func bulkError(res *bulk.Response) error {
	if !res.Errors {
		return nil
	}
	for _, item := range res.Items {
		for op, r := range item {
			if r.Error == nil || (op.Name == "delete" && r.Status == http.StatusNotFound) ||
				(op.Name == "index" && r.Status == http.StatusConflict) {
				continue
			}
			id := ""
			if r.Id_ != nil {
				id = *r.Id_
			}
			reason := r.Error.Type
			if r.Error.Reason != nil {
				reason += ": " + *r.Error.Reason
			}
			return fmt.Errorf("%s %s: status %d: %s", op.Name, id, r.Status, reason)
		}
	}
	return nil
}

func toSource(d placeindex.Doc) source {
	s := source{
		PlaceID:     d.PlaceID,
		Name:        d.Name,
		Category:    d.Category,
		Description: d.Description,
		TownSlug:    d.TownSlug,
		RatingCount: d.RatingCount,
	}
	if d.Location != nil {
		s.Location = &location{Lat: d.Location.Lat, Lon: d.Location.Lng}
	}
	return s
}

// Checkpoint implements placeindex.Index.
func (x *Index) Checkpoint(ctx context.Context) (string, error) {
	current, err := x.live()
	if err != nil {
		return "", err
	}
	res, err := x.es.Get(x.checkpointIndex, current).Do(ctx)
	if err != nil {
		return "", fmt.Errorf("elasticindex: reading checkpoint of %s: %w", current, err)
	}
	if !res.Found {
		return "", nil
	}
	var cp checkpointDoc
	if err := json.Unmarshal(res.Source_, &cp); err != nil {
		return "", fmt.Errorf("elasticindex: reading checkpoint of %s: %w", current, err)
	}
	return cp.Checkpoint, nil
}

// List implements placeindex.Index.
func (x *Index) List(ctx context.Context, q placeindex.ListQuery) (placeindex.Result, error) {
	if _, err := x.live(); err != nil {
		return placeindex.Result{}, err
	}
	limit, offset := placeindex.Page(q.Limit, q.Offset)
	b := &types.BoolQuery{}
	if q.TownPrefix != "" {
		// A filter narrows matches without adding to their score.
		b.Filter = append(b.Filter, types.Query{Prefix: map[string]types.PrefixQuery{"town_slug": {Value: q.TownPrefix}}})
	}
	sort := []types.SortCombinations{fieldSort("rating_count", sortorder.Desc), fieldSort("place_id", sortorder.Asc)}
	if words := placeindex.Words(q.Q); len(words) > 0 {
		for _, w := range words {
			b.Must = append(b.Must, wordQuery(w))
		}
		sort = []types.SortCombinations{types.SortOptions{Score_: &types.ScoreSort{Order: &sortorder.Desc}}, fieldSort("place_id", sortorder.Asc)}
	}
	res, err := x.search(ctx, &search.Request{
		Query:          &types.Query{Bool: b},
		Sort:           sort,
		From:           &offset,
		Size:           &limit,
		TrackTotalHits: true,
		Source_:        false,
	})
	if err != nil {
		return placeindex.Result{}, fmt.Errorf("elasticindex: list: %w", err)
	}
	hits := make([]placeindex.Hit, 0, len(res.Hits.Hits))
	for _, h := range res.Hits.Hits {
		if h.Id_ != nil {
			hits = append(hits, placeindex.Hit{PlaceID: *h.Id_})
		}
	}
	return placeindex.Result{Hits: hits, Total: total(res)}, nil
}

// wordQuery matches places where word prefixes a word of the name, category
// or description.
func wordQuery(word string) types.Query {
	match := func(field string, boost float32) types.Query {
		return types.Query{Match: map[string]types.MatchQuery{field: {Query: word, Boost: &boost, Operator: &operator.And}}}
	}
	should := []types.Query{
		match("name.grams", boostName),
		match("category.grams", boostCategory),
		match("description.grams", boostDescription),
		match("name", boostWholeWord),
		match("category.words", boostWholeWord),
		match("description", boostWholeWord),
	}
	// Byte length bounds the folded length from above, so no word that
	// could outgrow the n-grams is left without the prefix fallback.
	if len(word) > maxGram {
		for _, field := range []string{"name", "category.words", "description"} {
			should = append(should, types.Query{MatchBoolPrefix: map[string]types.MatchBoolPrefixQuery{field: {Query: word, Operator: &operator.And}}})
		}
	}
	return types.Query{Bool: &types.BoolQuery{Should: should, MinimumShouldMatch: 1}}
}

// Near implements placeindex.Index. DistanceKm is recomputed from the stored
// coordinates: geo_point quantizes to about a centimetre, the source keeps
// the exact values.
func (x *Index) Near(ctx context.Context, q placeindex.GeoQuery) (placeindex.Result, error) {
	if _, err := x.live(); err != nil {
		return placeindex.Result{}, err
	}
	limit, offset := placeindex.Page(q.Limit, q.Offset)
	if !(q.RadiusKm > 0) {
		return placeindex.Result{Hits: []placeindex.Hit{}}, nil
	}
	center := types.LatLonGeoLocation{Lat: types.Float64(q.Center.Lat), Lon: types.Float64(q.Center.Lng)}
	b := &types.BoolQuery{Filter: []types.Query{{GeoDistance: &types.GeoDistanceQuery{
		Distance:         strconv.FormatFloat(q.RadiusKm, 'f', -1, 64) + "km",
		DistanceType:     &geodistancetype.Arc,
		GeoDistanceQuery: map[string]types.GeoLocation{"location": center},
	}}}}
	if q.CategoryPrefix != "" {
		b.Filter = append(b.Filter, types.Query{Bool: &types.BoolQuery{
			Should: []types.Query{
				{Term: map[string]types.TermQuery{"category": {Value: q.CategoryPrefix}}},
				{Prefix: map[string]types.PrefixQuery{"category": {Value: q.CategoryPrefix + "."}}},
			},
			MinimumShouldMatch: 1,
		}})
	}
	if q.ExcludeID != "" {
		b.MustNot = append(b.MustNot, types.Query{Ids: &types.IdsQuery{Values: []string{q.ExcludeID}}})
	}
	res, err := x.search(ctx, &search.Request{
		Query: &types.Query{Bool: b},
		Sort: []types.SortCombinations{
			types.SortOptions{GeoDistance_: &types.GeoDistanceSort{
				GeoDistanceSort: map[string][]types.GeoLocation{"location": {center}},
				Order:           &sortorder.Asc,
				Unit:            &distanceunit.Kilometers,
				DistanceType:    &geodistancetype.Arc,
			}},
			fieldSort("place_id", sortorder.Asc),
		},
		From:           &offset,
		Size:           &limit,
		TrackTotalHits: true,
		Source_:        &types.SourceFilter{Includes: []string{"location"}},
	})
	if err != nil {
		return placeindex.Result{}, fmt.Errorf("elasticindex: near: %w", err)
	}
	hits := make([]placeindex.Hit, 0, len(res.Hits.Hits))
	for _, h := range res.Hits.Hits {
		var s struct{ Location *location }
		if h.Id_ == nil {
			continue
		}
		if err := json.Unmarshal(h.Source_, &s); err != nil || s.Location == nil {
			return placeindex.Result{}, fmt.Errorf("elasticindex: near: hit %s has no readable location", *h.Id_)
		}
		d := placeindex.DistanceKm(q.Center, placeindex.GeoPoint{Lat: s.Location.Lat, Lng: s.Location.Lon})
		hits = append(hits, placeindex.Hit{PlaceID: *h.Id_, DistanceKm: d})
	}
	return placeindex.Result{Hits: hits, Total: total(res)}, nil
}

func (x *Index) search(ctx context.Context, req *search.Request) (*search.Response, error) {
	return x.es.Search().Index(x.alias).Request(req).Do(ctx)
}

func fieldSort(field string, order sortorder.SortOrder) types.SortOptions {
	return types.SortOptions{SortOptions: map[string]types.FieldSort{field: {Order: &order}}}
}

func total(res *search.Response) int {
	if res.Hits.Total == nil {
		return len(res.Hits.Hits)
	}
	return int(res.Hits.Total.Value)
}

// Rebuild implements placeindex.Index.
func (x *Index) Rebuild(ctx context.Context, fill func(w placeindex.Writer) error) error {
	x.rebuildMu.Lock()
	defer x.rebuildMu.Unlock()
	old, err := x.live()
	if err != nil {
		return err
	}
	n, err := x.generationNumber(old)
	if err != nil {
		return err
	}
	next := x.generation(n + 1)
	// A leftover from an interrupted Rebuild was never live.
	if err := x.deleteIndex(ctx, next); err != nil {
		return err
	}
	if err := x.createIndex(ctx, next, indexBody); err != nil {
		return err
	}
	abandon := func(cause error) error {
		// Cleanup must run even when ctx is what failed.
		cleanup := context.WithoutCancel(ctx)
		return errors.Join(cause, x.deleteIndex(cleanup, next), x.deleteCheckpoint(cleanup, next))
	}
	if err := fill(writer{x: x, index: next}); err != nil {
		return abandon(fmt.Errorf("elasticindex: rebuild: %w", err))
	}
	if _, err := x.es.Indices.Refresh().Index(next).Do(ctx); err != nil {
		return abandon(fmt.Errorf("elasticindex: refreshing %s: %w", next, err))
	}
	if err := x.pointAlias(ctx, old, next); err != nil {
		return abandon(err)
	}
	x.mu.Lock()
	if x.current != "" {
		x.current = next
	}
	x.mu.Unlock()

	// The swap is committed; what follows only frees the old generation.
	if err := errors.Join(x.deleteIndex(ctx, old), x.deleteCheckpoint(ctx, old)); err != nil {
		return fmt.Errorf("elasticindex: rebuild committed, removing %s: %w", old, err)
	}
	return nil
}

// writer fills a generation being rebuilt; it skips the per-batch refresh
// because nobody reads the generation until Rebuild refreshes it once.
type writer struct {
	x     *Index
	index string
}

func (w writer) Upsert(ctx context.Context, docs []placeindex.Doc, deleteIDs []string, checkpoint string) error {
	return w.x.write(ctx, w.index, docs, deleteIDs, checkpoint, false)
}

func (x *Index) generation(n int) string { return fmt.Sprintf("%s-%d", x.alias, n) }

func (x *Index) generationNumber(index string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(index, x.alias+"-"))
	if err != nil || !strings.HasPrefix(index, x.alias+"-") {
		return 0, fmt.Errorf("elasticindex: alias %s points at %q, not %s-<n>", x.alias, index, x.alias)
	}
	return n, nil
}

// resolveAlias returns the concrete index behind the alias, "" when there is
// no alias yet.
func (x *Index) resolveAlias(ctx context.Context) (string, error) {
	exists, err := x.es.Indices.ExistsAlias(x.alias).Do(ctx)
	if err != nil {
		return "", fmt.Errorf("elasticindex: checking alias %s: %w", x.alias, err)
	}
	if !exists {
		return "", nil
	}
	res, err := x.es.Indices.GetAlias().Name(x.alias).Do(ctx)
	if err != nil {
		return "", fmt.Errorf("elasticindex: reading alias %s: %w", x.alias, err)
	}
	if len(res) != 1 {
		return "", fmt.Errorf("elasticindex: alias %s points at %d indexes, want 1", x.alias, len(res))
	}
	for index := range res {
		if _, err := x.generationNumber(index); err != nil {
			return "", err
		}
		return index, nil
	}
	return "", nil
}

// pointAlias moves the alias from old ("" = nowhere) to next in one atomic
// update-aliases call.
func (x *Index) pointAlias(ctx context.Context, old, next string) error {
	var actions []types.IndicesAction
	if old != "" {
		actions = append(actions, types.IndicesAction{Remove: &types.RemoveAction{Index: &old, Alias: &x.alias}})
	}
	actions = append(actions, types.IndicesAction{Add: &types.AddAction{Index: &next, Alias: &x.alias}})
	if _, err := x.es.Indices.UpdateAliases().Request(&updatealiases.Request{Actions: actions}).Do(ctx); err != nil {
		return fmt.Errorf("elasticindex: pointing alias %s at %s: %w", x.alias, next, err)
	}
	return nil
}

func (x *Index) createIndex(ctx context.Context, name, body string) error {
	if _, err := x.es.Indices.Create(name).Raw(strings.NewReader(body)).Do(ctx); err != nil {
		return fmt.Errorf("elasticindex: creating %s: %w", name, err)
	}
	return nil
}

// deleteIndex deletes one index by name; a missing index is not an error.
func (x *Index) deleteIndex(ctx context.Context, name string) error {
	if _, err := x.es.Indices.Delete(name).IgnoreUnavailable(true).Do(ctx); err != nil && !isNotFound(err) {
		return fmt.Errorf("elasticindex: deleting %s: %w", name, err)
	}
	return nil
}

func (x *Index) deleteCheckpoint(ctx context.Context, index string) error {
	if _, err := x.es.Delete(x.checkpointIndex, index).Do(ctx); err != nil && !isNotFound(err) {
		return fmt.Errorf("elasticindex: deleting checkpoint of %s: %w", index, err)
	}
	return nil
}

func isNotFound(err error) bool {
	var es *types.ElasticsearchError
	return errors.As(err, &es) && es.Status == http.StatusNotFound
}

func isAlreadyExists(err error) bool {
	var es *types.ElasticsearchError
	return errors.As(err, &es) && es.ErrorCause.Type == "resource_already_exists_exception"
}
