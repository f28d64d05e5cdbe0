// Package elasticindex is the place index on Elasticsearch 8.x.
//
// Reads and writes go through an alias (the index prefix, e.g. "places") that points at
// one concrete generation ("places-1", "places-2", ...). Every serving process opens its
// own Index on the same alias, and a rebuild may run in another process beside them, so
// no process trusts the generation it saw last: writes go through the alias and
// Checkpoint resolves it. Rebuild fills a new generation, refreshes it and moves the alias
// in one update-aliases call, so readers switch from one complete generation to the next.
// Each generation's checkpoint is a document, keyed by the concrete index name, in
// "<prefix>-checkpoint". Generations are exactly "<prefix>-<digits>"; nothing else
// matching "<prefix>-*" (another prefix such as "places-eu") is ever touched.
package elasticindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// ErrClosed is returned by every method called after Close.
var ErrClosed = errors.New("elasticindex: index is closed")

var _ placeindex.Index = (*Index)(nil)

// Index is the place index on Elasticsearch. It is safe for concurrent use, and any
// number of processes may open the same prefix at once.
type Index struct {
	es              *elasticsearch.TypedClient
	alias           string // what readers query and writers write through
	checkpointIndex string

	rebuildMu sync.Mutex // one Rebuild at a time in this process

	mu     sync.RWMutex
	closed bool
	// seen is the generation whose checkpoint this Index last read (Open, Checkpoint, or
	// its own Rebuild's swap). Upsert stores its checkpoint only for that generation:
	// the caller chose the batch from that checkpoint, and storing it for a generation
	// another process's Rebuild swapped in since would claim events it never received.
	seen string
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

// Bounds of the waits on the cluster (variables so that a test can shorten them).
var (
	dialTimeout   = 5 * time.Second
	answerTimeout = 30 * time.Second // a bulk of a rebuild's batch answers well within it
	openTimeout   = 15 * time.Second
	// retryBackoff is the wait before the nth retry of a request the cluster refused for load
	// (429) or a gateway's 502–504, and before a bulk's items rejected with 429 are sent again.
	retryBackoff = func(attempt int) time.Duration { return 100 * time.Millisecond << min(attempt, 6) }
)

// transportRetries is how many times the client sends again a request refused for load or by a
// gateway (docs/operations.md: three times, after 200, 400 and 800 ms).
const transportRetries = 3

// transportBackoff is the client's pause before its attempt-th retry. The client also asks for
// a pause after its last attempt, when nothing follows it: none is taken then, or a read
// request would wait 1.6 s more for its 503.
func transportBackoff(attempt int) time.Duration {
	if attempt > transportRetries {
		return 0
	}
	return retryBackoff(attempt)
}

// maxBulkBytes bounds one _bulk request body: Elasticsearch refuses a body over
// http.max_content_length (100mb by default) with 413, and a batch the catalog accepts can be
// larger (an import line may hold 1 MiB of description, which JSON can write six times over),
// so a batch is sent in as many requests as it needs. A variable for the tests.
var maxBulkBytes = 16 << 20

// bulkRetries is how many times items a bulk answered 429 for are sent again.
const bulkRetries = 5

// Open connects to the Elasticsearch at url and opens the place index named
// indexPrefix, creating its checkpoint index and a first generation when absent.
//
// url is the only connection setting: credentials go in it (https://user:pass@host:9200),
// and a cluster whose certificate is not signed by a CA this machine trusts is refused.
func Open(ctx context.Context, url string, indexPrefix string) (*Index, error) {
	if indexPrefix == "" || strings.ToLower(indexPrefix) != indexPrefix {
		return nil, fmt.Errorf("elasticindex: index prefix %q must be non-empty lowercase", indexPrefix)
	}
	// A cluster that accepts connections and never answers (a partition, a node stuck) must not
	// hold a request, or the start of serve, for ever: connecting is bounded, and so is the
	// wait for an answer's headers; opening is bounded as PostgreSQL's is.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	transport.ResponseHeaderTimeout = answerTimeout
	es, err := elasticsearch.NewTypedClient(elasticsearch.Config{Addresses: []string{url}, Transport: transport,
		// A cluster refusing for load (429) is asked again after a pause, as Elasticsearch asks;
		// a request that timed out is not sent again (it would wait answerTimeout once more each
		// time, and a slow bulk may still be running).
		RetryOnStatus: []int{http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout},
		MaxRetries:    transportRetries,
		RetryBackoff:  transportBackoff,
		RetryOnError: func(_ *http.Request, err error) bool {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}})
	if err != nil {
		return nil, fmt.Errorf("elasticindex: client: %w", err)
	}
	x := &Index{es: es, alias: indexPrefix, checkpointIndex: indexPrefix + "-checkpoint"}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()

	exists, err := es.Indices.Exists(x.checkpointIndex).Do(ctx)
	if err != nil {
		return nil, fmt.Errorf("elasticindex: checking %s: %w", x.checkpointIndex, err)
	}
	if !exists {
		if err := x.createIndex(ctx, x.checkpointIndex, checkpointIndexBody); err != nil && !isAlreadyExists(err) {
			return nil, err
		}
	}
	live, err := x.liveGeneration(ctx)
	if err != nil {
		return nil, err
	}
	x.seen = live
	return x, nil
}

// Prefix is the index prefix, which is also the alias readers query.
func (x *Index) Prefix() string { return x.alias }

// Close stops the index from being used. The client holds no resources that
// need releasing beyond idle HTTP connections.
func (x *Index) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closed = true
	return nil
}

// Drop deletes every index this prefix owns: all its generations ("<prefix>-<digits>",
// never another prefix's "<prefix>-eu-3") and the checkpoint index. It is for tests and
// operators retiring an index.
func (x *Index) Drop(ctx context.Context) error {
	gens, err := x.generations(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, g := range gens {
		errs = append(errs, x.deleteIndex(ctx, g.name))
	}
	errs = append(errs, x.deleteIndex(ctx, x.checkpointIndex))
	return errors.Join(errs...)
}

// lastSeen returns the generation whose checkpoint was last read, or ErrClosed.
func (x *Index) lastSeen() (string, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.closed {
		return "", ErrClosed
	}
	return x.seen, nil
}

func (x *Index) setSeen(index string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seen = index
}

// Upsert implements placeindex.Index. Documents are visible to List and Near when it
// returns. The checkpoint is written only after every document operation succeeded, so a
// failed batch is replayed rather than skipped.
//
// The batch goes through the alias with require_alias, so it lands in the generation
// readers query, and Elasticsearch refuses it (rather than auto-creating an index) when
// there is no alias. The checkpoint is stored for the generation Checkpoint last read:
// when another process's Rebuild has swapped in a new generation since, the documents
// still reach it, but its checkpoint stays as that Rebuild stored it, and the caller's
// next Checkpoint tells it where to resume.
//
// A delete carries no version and removes the place whatever its version; an older
// version upserted after it brings the place back once Elasticsearch has forgotten the
// deleted document's version (index.gc_deletes, 60 s by default). PlaceIndex never
// deletes. Several processes store the same generation's checkpoint, and the last write
// wins even when it is older: that only makes a process re-apply a range, which the
// documents' external versions make harmless.
func (x *Index) Upsert(ctx context.Context, docs []placeindex.Doc, deleteIDs []string, checkpoint string) error {
	seen, err := x.lastSeen()
	if err != nil {
		return err
	}
	landed, err := x.bulk(ctx, x.alias, docs, deleteIDs, true)
	if err != nil {
		return err
	}
	for _, index := range landed {
		if index != seen {
			return nil // another generation is live now: its checkpoint is not this batch's to move
		}
	}
	return x.storeCheckpoint(ctx, seen, checkpoint)
}

// bulkOp is one action of a bulk: a document to index, or (doc nil) a place to delete.
type bulkOp struct {
	doc      *placeindex.Doc
	deleteID string
}

// size bounds the bytes the action takes in a bulk body from above: JSON writes a byte of a
// string as at most six (\u003c).
func (o bulkOp) size() int {
	if o.doc == nil {
		return 64 + 6*len(o.deleteID)
	}
	d := o.doc
	return 256 + 6*(2*len(d.PlaceID)+len(d.Name)+len(d.Category)+len(d.Description)+len(d.TownSlug))
}

// bulk applies docs then deletes through target, an alias, in requests of at most
// maxBulkBytes. require_alias makes Elasticsearch refuse the batch when target is not an alias
// (its generation was deleted) instead of auto-creating an index of that name with a dynamic
// mapping. It returns the concrete indexes the operations landed in, as the responses name
// them. Sending a request again is harmless: documents carry their stream's version.
func (x *Index) bulk(ctx context.Context, target string, docs []placeindex.Doc, deleteIDs []string, visible bool) ([]string, error) {
	ops := make([]bulkOp, 0, len(docs)+len(deleteIDs))
	for i := range docs {
		if docs[i].PlaceID == "" {
			return nil, errors.New("elasticindex: upsert: doc without PlaceID")
		}
		ops = append(ops, bulkOp{doc: &docs[i]})
	}
	for _, id := range deleteIDs {
		ops = append(ops, bulkOp{deleteID: id})
	}
	var landed []string
	for start := 0; start < len(ops); {
		end, size := start+1, ops[start].size()
		for end < len(ops) && size+ops[end].size() <= maxBulkBytes {
			size += ops[end].size()
			end++
		}
		// Waiting for a refresh once, after the last request, makes every earlier one
		// visible too: a refresh shows everything indexed before it.
		if err := x.bulkRequest(ctx, target, ops[start:end], visible && end == len(ops), &landed); err != nil {
			return nil, fmt.Errorf("elasticindex: bulk into %s: %w", target, err)
		}
		start = end
	}
	return landed, nil
}

// bulkRequest sends ops in one bulk request, and sends again, after a pause, the items
// Elasticsearch rejected for load (429: a full write queue, indexing pressure), up to
// bulkRetries times. Any other failed item is the batch's error.
func (x *Index) bulkRequest(ctx context.Context, target string, ops []bulkOp, visible bool, landed *[]string) error {
	for attempt := 0; ; attempt++ {
		req := x.es.Bulk().Index(target).RequireAlias(true)
		if visible {
			req.Refresh(refresh.Waitfor)
		}
		for _, o := range ops {
			if o.doc == nil {
				if err := req.DeleteOp(types.DeleteOperation{Id_: &o.deleteID}); err != nil {
					return fmt.Errorf("delete %s: %w", o.deleteID, err)
				}
				continue
			}
			op := types.IndexOperation{Id_: &o.doc.PlaceID}
			if o.doc.Version > 0 {
				// The stream's version as the document's: Elasticsearch keeps the newer one.
				op.Version, op.VersionType = &o.doc.Version, &versiontype.Externalgte
			}
			if err := req.IndexOp(op, toSource(*o.doc)); err != nil {
				return fmt.Errorf("upsert %s: %w", o.doc.PlaceID, err)
			}
		}
		res, err := req.Do(ctx)
		if err != nil {
			return err
		}
		last := attempt == bulkRetries
		if err := bulkError(res, !last); err != nil {
			return err
		}
		var again []bulkOp
		for i, item := range res.Items {
			for _, r := range item {
				if r.Status == http.StatusTooManyRequests && i < len(ops) {
					again = append(again, ops[i])
				} else if r.Index_ != "" && !slices.Contains(*landed, r.Index_) {
					*landed = append(*landed, r.Index_)
				}
			}
		}
		if len(again) == 0 || last {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryBackoff(attempt)):
		}
		ops = again
	}
}

func (x *Index) storeCheckpoint(ctx context.Context, index, checkpoint string) error {
	_, err := x.es.Index(x.checkpointIndex).Id(index).Document(checkpointDoc{Checkpoint: checkpoint}).Do(ctx)
	if err != nil {
		return fmt.Errorf("elasticindex: storing checkpoint of %s: %w", index, err)
	}
	return nil
}

// bulkError reports the first failed item. Deleting a missing place is not a
// failure, since re-applying a batch must be harmless; nor is a version conflict
// on indexing, which means the index already holds a newer version of the place;
// nor, when retrying, an item rejected for load (429), which is sent again.
// A missing index (no alias to write through) is a failure for deletes too.
func bulkError(res *bulk.Response, retrying bool) error {
	if !res.Errors {
		return nil
	}
	for _, item := range res.Items {
		for op, r := range item {
			if r.Error == nil || (op.Name == "delete" && r.Status == http.StatusNotFound && r.Error.Type != "index_not_found_exception") ||
				(op.Name == "index" && r.Status == http.StatusConflict) || (retrying && r.Status == http.StatusTooManyRequests) {
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

// Checkpoint implements placeindex.Index: the checkpoint of the generation the alias
// points at now, which may be one another process's Rebuild swapped in. When there is
// no alias (its generation was deleted), it creates a fresh generation as Open does and
// answers "", so the caller replays into it.
func (x *Index) Checkpoint(ctx context.Context) (string, error) {
	if _, err := x.lastSeen(); err != nil {
		return "", err
	}
	live, err := x.liveGeneration(ctx)
	if err != nil {
		return "", err
	}
	x.setSeen(live)
	res, err := x.es.Get(x.checkpointIndex, live).Do(ctx)
	if err != nil {
		return "", fmt.Errorf("elasticindex: reading checkpoint of %s: %w", live, err)
	}
	if !res.Found {
		// The typed Get answers a missing index as a document not found: a checkpoint index
		// deleted (by hand, a snapshot restore of the places only) must not read as "replay
		// everything into the live generation".
		exists, err := x.es.Indices.Exists(x.checkpointIndex).Do(ctx)
		if err != nil {
			return "", fmt.Errorf("elasticindex: reading checkpoint of %s: %w", live, err)
		}
		if !exists {
			return "", fmt.Errorf("elasticindex: the checkpoint index %s is missing: the live generation %s cannot say what it holds (run kyapi rebuild)",
				x.checkpointIndex, live)
		}
		return "", nil
	}
	var cp checkpointDoc
	if err := json.Unmarshal(res.Source_, &cp); err != nil {
		return "", fmt.Errorf("elasticindex: reading checkpoint of %s: %w", live, err)
	}
	return cp.Checkpoint, nil
}

// List implements placeindex.Index. With q, places are ranked as nameFirst says.
func (x *Index) List(ctx context.Context, q placeindex.ListQuery) (placeindex.Result, error) {
	if _, err := x.lastSeen(); err != nil {
		return placeindex.Result{}, err
	}
	limit, offset := placeindex.Page(q.Limit, q.Offset)
	b := &types.BoolQuery{}
	if q.TownPrefix != "" {
		// A filter narrows matches without adding to their score.
		b.Filter = append(b.Filter, types.Query{Prefix: map[string]types.PrefixQuery{"town_slug": {Value: q.TownPrefix}}})
	}
	sort := []types.SortCombinations{fieldSort("rating_count", sortorder.Desc), fieldSort("place_id", sortorder.Asc)}
	copies := ""
	if words := placeindex.DistinctWords(q.Q); len(words) > 0 {
		text := &types.BoolQuery{}
		for _, w := range words {
			text.Must = append(text.Must, wordQuery(w))
		}
		nameFirst(b, types.Query{Bool: text}, words)
		sort = []types.SortCombinations{types.SortOptions{Score_: &types.ScoreSort{Order: &sortorder.Desc}}, fieldSort("place_id", sortorder.Asc)}
		copies = samePages(q.TownPrefix, words)
	}
	res, err := x.search(ctx, copies, &search.Request{
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
	// Folding turns a character of n bytes into at most 4n/3 characters (⑽, 3 bytes, is
	// "(10)"), so no word that could outgrow the n-grams once folded is left without the
	// prefix fallback.
	if 4*len(word) > 3*maxGram {
		for _, field := range []string{"name", "category.words", "description"} {
			should = append(should, types.Query{MatchBoolPrefix: map[string]types.MatchBoolPrefixQuery{field: {Query: word, Operator: &operator.And}}})
		}
	}
	return types.Query{Bool: &types.BoolQuery{Should: should, MinimumShouldMatch: 1}}
}

// Near implements placeindex.Index. DistanceKm is recomputed from the stored
// coordinates: geo_point quantizes to about a centimetre, the source keeps
// the exact values. The radius filter and the distance sort work on the
// quantized point, though: a place within about a centimetre of the radius can
// be in or out where the embedded index (exact) says otherwise, so a hit's
// DistanceKm can exceed RadiusKm by up to that much. A page is sorted again by
// the DistanceKm it reports, ties by PlaceID, so its rows agree with their
// distances. The sort's distance is off by up to about a centimetre (the
// quantized point) and, beyond about 1,000 km, by up to 40 cm more (Lucene's
// SloppyMath.haversinMeters, which Elasticsearch sorts by): two places that
// close in distance on either side of a page boundary can still come in either
// order (docs/api.md, "Geo search").
func (x *Index) Near(ctx context.Context, q placeindex.GeoQuery) (placeindex.Result, error) {
	if _, err := x.lastSeen(); err != nil {
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
	if q.CategoryPrefix != "" || q.ByCategory {
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
	res, err := x.search(ctx, "", &search.Request{
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
	placeindex.SortHitsByDistance(hits)
	return placeindex.Result{Hits: hits, Total: total(res)}, nil
}

// search runs req on the alias. preference, when not "", is a custom preference: Elasticsearch
// sends the searches giving the same one to the same shard copies while the cluster's layout
// holds.
func (x *Index) search(ctx context.Context, preference string, req *search.Request) (*search.Response, error) {
	s := x.es.Search().Index(x.alias).Request(req)
	if preference != "" {
		s.Preference(preference)
	}
	res, err := s.Do(ctx)
	return res, unavailable(err)
}

// samePages is the preference of a q's searches, one per q and town, whatever the page: each
// copy of the shard (the primary, its replicas) scores by its own term statistics, which count
// a replaced place's old document until that copy merges it away, so pages of one q ranked by
// different copies could repeat or skip places (docs/api.md, "Places": offset pages through the
// same order). Without q the order is the sort's alone, the same on every copy. One preference
// per q, not one for all, keeps the searches spread over the copies.
func samePages(townPrefix string, words []string) string {
	h := fnv.New64a()
	h.Write([]byte(townPrefix))
	for _, w := range words {
		h.Write([]byte{0})
		h.Write([]byte(w))
	}
	return "q-" + strconv.FormatUint(h.Sum64(), 16) // a custom preference must not start with "_"
}

// unavailable marks an error answer of a reachable cluster that cannot serve now — 429 (its
// queues full), a 5xx (red while it restarts, a gateway in front of it), or a body that is not
// its JSON (a proxy's error page) — as domain.ErrUnavailable, which the read API answers 503,
// nothing charged, as it does when the cluster cannot be reached at all (docs/api.md).
func unavailable(err error) error {
	var es *types.ElasticsearchError
	var syntax *json.SyntaxError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &es) && (es.Status == http.StatusTooManyRequests || es.Status >= 500):
		return fmt.Errorf("%w (Elasticsearch answered %d: %w)", domain.ErrUnavailable, es.Status, err)
	case errors.As(err, &syntax):
		return fmt.Errorf("%w (Elasticsearch's answer is not its JSON: %w)", domain.ErrUnavailable, err)
	}
	return err
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

// Rebuild implements placeindex.Index. It may run while other processes serve from and
// write through the alias, or rebuild too:
//   - it fills a new generation, numbered above every existing one, that it created
//     itself; never the live generation or a leftover;
//   - it writes that generation through an alias of its own ("<prefix>-<n>-fill") with
//     require_alias, so that if the generation is deleted under it the fill fails instead
//     of recreating it;
//   - it swaps the alias away from whatever generation is live when the fill ends, and
//     when the swap fails it asks where the alias points: a swap applied whose answer was
//     lost is committed, not undone;
//   - it never deletes the generation the alias points at. Once committed it deletes the
//     generations numbered below the new one that the alias does not point at: the one
//     it replaced and any left by a rebuild that failed or crashed before its cleanup.
func (x *Index) Rebuild(ctx context.Context, fill func(w placeindex.Writer) error) error {
	x.rebuildMu.Lock()
	defer x.rebuildMu.Unlock()
	if _, err := x.lastSeen(); err != nil {
		return err
	}
	if _, err := x.liveGeneration(ctx); err != nil {
		return err
	}
	next, n, err := x.createNextGeneration(ctx)
	if err != nil {
		return err
	}
	abandon := func(cause error) error {
		// Cleanup must run even when ctx is what failed.
		return errors.Join(cause, x.deleteUnlessLive(context.WithoutCancel(ctx), next))
	}
	// A fresh generation starts from an empty checkpoint, whatever one of its name left.
	if err := x.deleteCheckpoint(ctx, next); err != nil {
		return abandon(err)
	}
	if err := fill(writer{x: x, index: next, target: fillAlias(next)}); err != nil {
		return abandon(fmt.Errorf("elasticindex: rebuild: %w", err))
	}
	if _, err := x.es.Indices.Refresh().Index(next).Do(ctx); err != nil {
		return abandon(fmt.Errorf("elasticindex: refreshing %s: %w", next, err))
	}
	old, err := x.resolveAlias(ctx)
	if err != nil {
		return abandon(err)
	}
	if err := x.swapAlias(ctx, old, next); err != nil {
		// Elasticsearch may have applied the swap and the answer been lost (a timeout, a
		// proxy's 504; the client's retry then finds the alias gone from old): only the
		// alias tells whether next is live now.
		now, lerr := x.resolveAlias(context.WithoutCancel(ctx))
		if lerr != nil {
			return fmt.Errorf("%w; reading where the alias points now: %v (%s is kept; a later Rebuild removes it unless it is live)", err, lerr, next)
		}
		if now != next {
			return abandon(err)
		}
	}
	x.setSeen(next)

	// The swap is committed; what follows only frees older generations.
	if err := x.removeStale(ctx, n); err != nil {
		return fmt.Errorf("elasticindex: rebuild committed, removing older generations: %w", err)
	}
	return nil
}

// writer fills a generation being rebuilt through its fill alias; it skips the per-batch
// refresh because nobody reads the generation until Rebuild refreshes it once.
type writer struct {
	x      *Index
	index  string // the generation
	target string // its fill alias
}

func (w writer) Upsert(ctx context.Context, docs []placeindex.Doc, deleteIDs []string, checkpoint string) error {
	if _, err := w.x.bulk(ctx, w.target, docs, deleteIDs, false); err != nil {
		return err
	}
	return w.x.storeCheckpoint(ctx, w.index, checkpoint)
}

// maxAttempts bounds the generation numbers Open and Rebuild try before giving up.
const maxAttempts = 100

func (x *Index) generation(n int) string { return fmt.Sprintf("%s-%d", x.alias, n) }

// fillAlias names the alias a generation is written through while Rebuild fills it. It
// can be no generation's name, of this prefix or any other: those end in digits.
func fillAlias(generation string) string { return generation + "-fill" }

// generationNumber reports whether index is one of this prefix's generations,
// "<prefix>-<digits>", and its number.
func (x *Index) generationNumber(index string) (int, bool) {
	digits, ok := strings.CutPrefix(index, x.alias+"-")
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}

// generationBody is the create body of a generation carrying alias from its creation.
func generationBody(alias string) string {
	var body map[string]json.RawMessage
	if err := json.Unmarshal([]byte(indexBody), &body); err != nil {
		panic("elasticindex: indexBody is not JSON: " + err.Error())
	}
	body["aliases"], _ = json.Marshal(map[string]struct{}{alias: {}})
	b, _ := json.Marshal(body)
	return string(b)
}

// liveGeneration returns the generation the alias points at. When there is no alias it
// creates a fresh generation with the alias in its create body, so the index and the alias
// appear together: the lowest-numbered generation that does not exist, starting from an
// empty checkpoint. Processes doing this at once all try the same numbers in the same
// order; whichever create fails with resource_already_exists looks at the alias again and
// finds the winner's. Generations that exist without the alias are left for Rebuild to
// remove.
func (x *Index) liveGeneration(ctx context.Context) (string, error) {
	for n := 1; n <= maxAttempts; n++ {
		live, err := x.resolveAlias(ctx)
		if err != nil || live != "" {
			return live, err
		}
		name := x.generation(n)
		exists, err := x.es.Indices.Exists(name).Do(ctx)
		if err != nil {
			return "", fmt.Errorf("elasticindex: checking %s: %w", name, err)
		}
		if exists {
			continue
		}
		// Before the alias can point at it: a checkpoint left by a former generation of
		// this name would make the empty index claim to be caught up.
		if err := x.deleteCheckpoint(ctx, name); err != nil {
			return "", err
		}
		err = x.createIndex(ctx, name, generationBody(x.alias))
		if err == nil {
			return name, nil
		}
		if !isAlreadyExists(err) {
			return "", err
		}
	}
	return "", fmt.Errorf("elasticindex: there is no alias %s, and %s to %s exist without it", x.alias, x.generation(1), x.generation(maxAttempts))
}

// createNextGeneration creates a generation numbered above every existing one, carrying
// its fill alias, and returns its name and number.
func (x *Index) createNextGeneration(ctx context.Context) (string, int, error) {
	gens, err := x.generations(ctx)
	if err != nil {
		return "", 0, err
	}
	top := 0
	for _, g := range gens {
		top = max(top, g.n)
	}
	for n := top + 1; n <= top+maxAttempts; n++ {
		name := x.generation(n)
		err := x.createIndex(ctx, name, generationBody(fillAlias(name)))
		if err == nil {
			return name, n, nil
		}
		if !isAlreadyExists(err) { // else another process's Rebuild took n
			return "", 0, err
		}
	}
	return "", 0, fmt.Errorf("elasticindex: could not create a generation of %s above %s", x.alias, x.generation(top))
}

// removeStale deletes, with their checkpoints, this prefix's generations numbered below
// `below` that the alias does not point at.
//
// Another process's Rebuild may swap the alias onto one of them between the listing and the
// delete, so they are deleted in one update-aliases call that also takes the alias off the
// generation it was listed on (must_exist) and puts it back: Elasticsearch applies the call
// whole or not at all, so when the alias has moved the call fails and deletes nothing, and the
// generations are listed again. Each retry follows a move of the alias or a generation deleted
// by another cleanup; past cleanupAttempts the rest is left for a later Rebuild.
func (x *Index) removeStale(ctx context.Context, below int) error {
	for attempt := 1; ; attempt++ {
		gens, err := x.generations(ctx)
		if err != nil {
			return err
		}
		live, stale := "", []string(nil)
		for _, g := range gens {
			switch {
			case g.live:
				live = g.name
			case g.n < below:
				stale = append(stale, g.name)
			}
		}
		if len(stale) == 0 {
			return nil
		}
		if live == "" {
			return fmt.Errorf("elasticindex: alias %s points at no generation: %s kept", x.alias, strings.Join(stale, ", "))
		}
		err = x.removeIndexesWhileLive(ctx, stale, live)
		if err == nil {
			var errs []error
			for _, g := range stale {
				errs = append(errs, x.deleteCheckpoint(ctx, g))
			}
			return errors.Join(errs...)
		}
		if !isNotFound(err) || attempt == cleanupAttempts {
			return err
		}
	}
}

// cleanupAttempts bounds how many times removeStale lists the generations again.
const cleanupAttempts = 5

// removeIndexesWhileLive deletes indexes in one update-aliases call that holds only while the
// alias is on live: it fails whole (404) when the alias is elsewhere, or when one of indexes
// no longer exists.
func (x *Index) removeIndexesWhileLive(ctx context.Context, indexes []string, live string) error {
	mustExist := true
	var actions []types.IndicesAction
	for _, name := range indexes {
		actions = append(actions, types.IndicesAction{RemoveIndex: &types.RemoveIndexAction{Index: &name}})
	}
	actions = append(actions,
		types.IndicesAction{Remove: &types.RemoveAction{Index: &live, Alias: &x.alias, MustExist: &mustExist}},
		types.IndicesAction{Add: &types.AddAction{Index: &live, Alias: &x.alias}})
	if _, err := x.es.Indices.UpdateAliases().Request(&updatealiases.Request{Actions: actions}).Do(ctx); err != nil {
		return fmt.Errorf("elasticindex: deleting %s while %s is live: %w", strings.Join(indexes, ", "), live, err)
	}
	return nil
}

type generationInfo struct {
	name string
	n    int
	live bool // the alias points at it
}

// generations lists this prefix's generations, lowest first: the indexes named
// "<prefix>-<digits>", not everything "<prefix>-*" matches.
func (x *Index) generations(ctx context.Context) ([]generationInfo, error) {
	res, err := x.getAliases(ctx, x.es.Indices.GetAlias().Index(x.alias+"-*"))
	if err != nil {
		return nil, fmt.Errorf("elasticindex: listing %s-*: %w", x.alias, err)
	}
	var gens []generationInfo
	for name, a := range res {
		if n, ok := x.generationNumber(name); ok {
			_, live := a.Aliases[x.alias]
			gens = append(gens, generationInfo{name: name, n: n, live: live})
		}
	}
	slices.SortFunc(gens, func(a, b generationInfo) int { return a.n - b.n })
	return gens, nil
}

// resolveAlias returns the generation the alias points at, "" when there is no alias.
func (x *Index) resolveAlias(ctx context.Context) (string, error) {
	res, err := x.getAliases(ctx, x.es.Indices.GetAlias().Name(x.alias))
	if err != nil {
		return "", fmt.Errorf("elasticindex: reading alias %s: %w", x.alias, err)
	}
	if len(res) > 1 {
		return "", fmt.Errorf("elasticindex: alias %s points at %d indexes, want 1", x.alias, len(res))
	}
	for index := range res {
		if _, ok := x.generationNumber(index); !ok {
			return "", fmt.Errorf("elasticindex: alias %s points at %q, not %s-<n>", x.alias, index, x.alias)
		}
		return index, nil
	}
	return "", nil
}

type indexAliases struct {
	Aliases map[string]json.RawMessage `json:"aliases"`
}

// getAliases performs a get-alias request; a 404 (no such alias) is an empty answer.
func (x *Index) getAliases(ctx context.Context, req interface {
	Perform(context.Context) (*http.Response, error)
}) (map[string]indexAliases, error) {
	res, err := req.Perform(ctx)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	switch {
	case res.StatusCode == http.StatusNotFound:
		return nil, nil
	case res.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("status %d: %s", res.StatusCode, body)
	}
	var m map[string]indexAliases
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// swapAlias moves the alias from old ("" = nowhere) to next, and takes next's fill alias
// away, in one atomic update-aliases call. must_exist makes the whole call fail when the
// alias is no longer on old (another process swapped it meanwhile), rather than leave it
// on two generations.
func (x *Index) swapAlias(ctx context.Context, old, next string) error {
	var actions []types.IndicesAction
	if old != "" {
		mustExist := true
		actions = append(actions, types.IndicesAction{Remove: &types.RemoveAction{Index: &old, Alias: &x.alias, MustExist: &mustExist}})
	}
	fill := fillAlias(next)
	actions = append(actions,
		types.IndicesAction{Add: &types.AddAction{Index: &next, Alias: &x.alias}},
		types.IndicesAction{Remove: &types.RemoveAction{Index: &next, Alias: &fill}})
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

// deleteUnlessLive deletes a generation and its checkpoint, unless the alias points at
// it or where the alias points cannot be read.
func (x *Index) deleteUnlessLive(ctx context.Context, name string) error {
	live, err := x.resolveAlias(ctx)
	if err != nil {
		return fmt.Errorf("%w (%s is kept)", err, name)
	}
	if live == name {
		return fmt.Errorf("elasticindex: %s is live: not deleting it", name)
	}
	return errors.Join(x.deleteIndex(ctx, name), x.deleteCheckpoint(ctx, name))
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
