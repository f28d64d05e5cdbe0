// Package bleveindex is the embedded place index: full text in a bleve index
// on local disk, geo search in an in-memory grid built from the same documents.
//
// The index lives under one directory holding generations (gen-000001, ...)
// and a CURRENT file naming the live one. Rebuild fills a new generation
// beside the live one and commits by rewriting CURRENT, so a restart always
// opens a complete generation.
package bleveindex

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search/query"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/durable"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// ErrClosed is returned by every method called after Close.
var ErrClosed = errors.New("bleveindex: index is closed")

// ErrInUse is returned by Open when another process holds the index: a generation's files
// are locked by the process that has them open (bolt's file lock), and Open waits a while
// for the lock (DefaultLockTimeout), not for ever.
var ErrInUse = errors.New("bleveindex: the index is in use by another process")

// DefaultLockTimeout is how long Open waits for another process to let go of the index.
const DefaultLockTimeout = 3 * time.Second

const (
	currentFile = "CURRENT"
	genPrefix   = "gen-"
	// loadPage is how many stored documents Open reads per request while
	// building the grid; large enough to be quick, small enough to stay lean.
	loadPage = 5000
)

var _ placeindex.Index = (*Index)(nil)

// Index is the embedded place index. It is safe for concurrent use.
type Index struct {
	dir  string
	lock *os.File // the directory's lock (lockDir), held until Close

	rebuildMu sync.Mutex // one Rebuild at a time

	// mu guards cur. Queries hold it shared for their whole run, so the swap
	// at the end of a Rebuild never closes a generation under a reader.
	mu  sync.RWMutex
	cur *generation

	writes *writeReport // every generation's failed writes, told to ReportWriteFailures
}

// generation is one complete copy of the index: a bleve index for full text,
// and in memory the grid of its located places and the ranking of all places.
type generation struct {
	name    string
	bleve   bleve.Index
	points  *grid
	ranking *ranking
	// versions is each place's version as indexed (placeindex.Doc.Version), so an
	// upsert can leave out documents older than what the index holds. Indexes built
	// before versions were stored start without them and learn them as they go.
	versions map[string]int64
	// writeMu keeps the bleve batch and the memory updates of one Upsert
	// together, so concurrent Upserts cannot apply in different orders.
	writeMu sync.Mutex
	dir     string       // the index's, the generation's parent
	writes  *writeReport // where bleve's failures to write it are reported
}

// Open opens the place index stored under dir, creating an empty one when dir
// holds none. Generations left over from an interrupted Rebuild are removed.
func Open(dir string) (*Index, error) {
	return OpenWaiting(context.Background(), dir, DefaultLockTimeout)
}

// OpenWaiting is Open, waiting at most lockTimeout for another process to let go of the
// index; past it, the error is ErrInUse. A lockTimeout of 0 waits for ever. The end of ctx
// ends the wait (the error is ctx's); loading the index once it is locked is not cut short.
func OpenWaiting(ctx context.Context, dir string, lockTimeout time.Duration) (x *Index, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bleveindex: %w", err)
	}
	// The directory's own lock, taken before anything in it is read or written: a generation's
	// files are locked only once they exist, and two processes starting on an empty directory
	// would otherwise both create the first one.
	lock, err := lockDir(ctx, dir, lockTimeout)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	name, err := readCurrent(dir)
	if err != nil {
		return nil, err
	}
	var g *generation
	writes := &writeReport{}
	if name == "" {
		name = genName(1)
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("bleveindex: %w", err)
		}
		if g, err = createGeneration(dir, name, writes); err != nil {
			return nil, err
		}
		if err := writeCurrent(dir, name); err != nil {
			g.close()
			return nil, err
		}
	} else if g, err = openGeneration(dir, name, lockTimeout, writes); err != nil {
		return nil, err
	}
	// A process rebuilding the index commits its new generation (CURRENT) before it lets go
	// of the old one: the old one, unlocked, is no longer the index, and the other
	// generations must not be removed as leftovers.
	if now, err := readCurrent(dir); err != nil || now != name {
		g.close()
		if err == nil {
			err = fmt.Errorf("%w (it was rebuilt while this one opened)", ErrInUse)
		}
		return nil, err
	}
	if err := removeOtherGenerations(dir, name); err != nil {
		g.close()
		return nil, err
	}
	return &Index{dir: dir, cur: g, lock: lock, writes: writes}, nil
}

// lockFile is the file under an index's directory whose lock (flock) the process using the
// index holds until Close.
const lockFile = "LOCK"

// lockDir takes dir's lock, waiting at most timeout (0: for ever) for another process to let
// go of it; past it, the error is ErrInUse. The lock goes with the file's closing, and with
// the process.
func lockDir(ctx context.Context, dir string, timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bleveindex: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("bleveindex: locking %s: %w", dir, err)
		}
		if timeout > 0 && time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%w (%s stayed locked for %v)", ErrInUse, dir, timeout)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ReportWriteFailures has report called when bleve fails to write the index to disk (its disk
// full) on its own goroutines, where it retries the write until it succeeds: at once for the
// first failure, then at most once a minute with the count of failures not reported since,
// and with a nil err once a write succeeds again. Meanwhile the index serves what it was
// given from memory (docs/operations.md, "DATA_DIR's disk full").
func (x *Index) ReportWriteFailures(report func(err error, notReported int)) {
	x.writes.mu.Lock()
	defer x.writes.mu.Unlock()
	x.writes.report = report
}

// Dir is the directory the index is stored under.
func (x *Index) Dir() string { return x.dir }

// Close closes the live generation. Closing twice is harmless.
func (x *Index) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cur == nil {
		return nil
	}
	err := x.cur.close()
	x.cur = nil
	if x.lock != nil {
		err = errors.Join(err, x.lock.Close()) // lets another process have the directory
		x.lock = nil
	}
	return err
}

// live runs f on the live generation while holding it open.
func (x *Index) live(f func(g *generation) error) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.cur == nil {
		return ErrClosed
	}
	return f(x.cur)
}

// Upsert implements placeindex.Index.
func (x *Index) Upsert(ctx context.Context, docs []placeindex.Doc, deleteIDs []string, checkpoint string) error {
	return x.live(func(g *generation) error { return g.Upsert(ctx, docs, deleteIDs, checkpoint) })
}

// Checkpoint implements placeindex.Index.
func (x *Index) Checkpoint(ctx context.Context) (string, error) {
	var cp string
	err := x.live(func(g *generation) error {
		v, err := g.bleve.GetInternal([]byte(checkpointKey))
		cp = string(v)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("bleveindex: reading checkpoint: %w", err)
	}
	return cp, nil
}

// List implements placeindex.Index.
func (x *Index) List(ctx context.Context, q placeindex.ListQuery) (placeindex.Result, error) {
	var res placeindex.Result
	err := x.live(func(g *generation) error {
		var err error
		res, err = g.list(ctx, q)
		return err
	})
	return res, err
}

// Near implements placeindex.Index.
func (x *Index) Near(ctx context.Context, q placeindex.GeoQuery) (placeindex.Result, error) {
	var res placeindex.Result
	err := x.live(func(g *generation) error {
		res = g.points.near(q)
		return nil
	})
	return res, err
}

// Rebuild implements placeindex.Index. The new generation is committed by
// rewriting CURRENT; only then do readers switch to it and the old one is
// deleted.
func (x *Index) Rebuild(ctx context.Context, fill func(w placeindex.Writer) error) error {
	x.rebuildMu.Lock()
	defer x.rebuildMu.Unlock()

	x.mu.RLock()
	if x.cur == nil {
		x.mu.RUnlock()
		return ErrClosed
	}
	n, err := genNumber(x.cur.name)
	x.mu.RUnlock()
	if err != nil {
		return err
	}
	name := genName(n + 1)
	path := filepath.Join(x.dir, name)
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("bleveindex: %w", err)
	}
	next, err := createGeneration(x.dir, name, x.writes)
	if err != nil {
		return err
	}
	abandon := func(cause error) error {
		next.close()
		if err := os.RemoveAll(path); err != nil {
			return errors.Join(cause, fmt.Errorf("bleveindex: removing abandoned generation: %w", err))
		}
		return cause
	}
	if err := fill(writer{next}); err != nil {
		return abandon(fmt.Errorf("bleveindex: rebuild: %w", err))
	}
	if err := ctx.Err(); err != nil {
		return abandon(fmt.Errorf("bleveindex: rebuild: %w", err))
	}

	x.mu.Lock()
	if x.cur == nil {
		x.mu.Unlock()
		return abandon(ErrClosed)
	}
	if err := writeCurrent(x.dir, name); err != nil {
		x.mu.Unlock()
		return abandon(err)
	}
	old := x.cur
	x.cur = next
	x.mu.Unlock()

	// The swap is committed; failing to clean up the old generation only
	// leaves a directory that the next Open removes.
	closeErr := old.close()
	removeErr := os.RemoveAll(filepath.Join(x.dir, old.name))
	if err := errors.Join(closeErr, removeErr); err != nil {
		return fmt.Errorf("bleveindex: rebuild committed, removing old generation: %w", err)
	}
	return nil
}

// writer hands a generation being rebuilt to fill without exposing queries on it.
type writer struct{ g *generation }

func (w writer) Upsert(ctx context.Context, docs []placeindex.Doc, deleteIDs []string, checkpoint string) error {
	return w.g.upsert(ctx, docs, deleteIDs, checkpoint, rebuildParts)
}

// rebuildParts is how many bleve batches a rebuild writes at once. bleve analyzes a batch's
// documents in parallel but builds its segment on one goroutine, and a rebuild waits for
// each batch: two batches at once keep both cores busy. Only a generation that is not yet
// live is written so; the live one keeps a range in one batch with its checkpoint.
const rebuildParts = 2

func createGeneration(dir, name string, writes *writeReport) (*generation, error) {
	m, err := newMapping()
	if err != nil {
		return nil, fmt.Errorf("bleveindex: mapping: %w", err)
	}
	b, err := bleve.NewUsing(filepath.Join(dir, name), m, bleve.Config.DefaultIndexType, bleve.Config.DefaultKVStore, bleveConfig())
	if err != nil {
		return nil, fmt.Errorf("bleveindex: creating %s: %w", name, err)
	}
	g := &generation{name: name, bleve: b, points: newGrid(), ranking: newRanking(), versions: map[string]int64{}, dir: dir, writes: writes}
	watched.watch(g)
	return g, nil
}

func openGeneration(dir, name string, lockTimeout time.Duration, writes *writeReport) (g *generation, err error) {
	// A generation damaged while no process had it open (a file of it truncated or overwritten)
	// can make bbolt or zap panic as it is read: an error of opening it, not a crash. A root.bolt
	// cut short is refused before bbolt maps it, as bbolt would read past its end; a fault in
	// what bbolt and zap map (damage the length does not show) is a panic of this goroutine.
	// root.bolt is read whole here first: bleve's own goroutines read what it does not read as
	// it opens (readBoltWhole).
	root := filepath.Join(dir, name, "store", "root.bolt")
	if err := checkBoltLength(root); err != nil {
		return nil, fmt.Errorf("bleveindex: opening %s: it cannot be read: %w", name, err)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var b bleve.Index
	defer func() {
		if r := recover(); r != nil {
			if b != nil {
				func() { defer func() { _ = recover() }(); _ = b.Close() }() // lets go of its files if it can
			}
			g, err = nil, fmt.Errorf("bleveindex: opening %s: it cannot be read: %v", name, r)
		}
	}()
	err = readBoltWhole(root, lockTimeout)
	if err == nil {
		config := bleveConfig()
		config["bolt_timeout"] = lockTimeout.String()
		b, err = bleve.OpenUsing(filepath.Join(dir, name), config)
	}
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%w (%s stayed locked for %v)", ErrInUse, name, lockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("bleveindex: opening %s: %w", name, err)
	}
	if err := checkSegments(b); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("bleveindex: opening %s: it cannot be read: %w", name, err)
	}
	g = &generation{name: name, bleve: b, points: newGrid(), ranking: newRanking(), versions: map[string]int64{}, dir: dir, writes: writes}
	watched.watch(g)
	if err := g.loadMemory(); err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

func (g *generation) close() error {
	err := g.bleve.Close()
	watched.unwatch(g)
	return err
}

// minDocsPerPart: a batch smaller than this is not worth splitting.
const minDocsPerPart = 100

// partOf is the batch of parts a place's documents go to.
func partOf(placeID string, parts int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(placeID))
	return int(h.Sum32() % uint32(parts))
}

// Upsert writes one batch, checkpoint included, in a single bleve batch and
// then mirrors it into the grid. Deletes apply after docs.
func (g *generation) Upsert(ctx context.Context, docs []placeindex.Doc, deleteIDs []string, checkpoint string) error {
	return g.upsert(ctx, docs, deleteIDs, checkpoint, 1)
}

// upsert is Upsert writing the documents in up to parts bleve batches at once (each place in
// the same one whatever its position), then the deletes and the checkpoint in one more: with
// parts > 1 a crash can leave some of a range's documents without its checkpoint, so only a
// rebuild's generation, abandoned on any failure, is written so.
func (g *generation) upsert(ctx context.Context, docs []placeindex.Doc, deleteIDs []string, checkpoint string, parts int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.writeMu.Lock()
	defer g.writeMu.Unlock()
	newer := docs[:0:0]
	for _, d := range docs {
		if d.PlaceID == "" {
			return errors.New("bleveindex: upsert: doc without PlaceID")
		}
		if d.Version > 0 && d.Version < g.versions[d.PlaceID] {
			continue // the index holds a newer version
		}
		newer = append(newer, d)
	}
	if len(newer) < parts*minDocsPerPart {
		parts = 1
	}
	batches := make([]*bleve.Batch, parts)
	for i := range batches {
		batches[i] = g.bleve.NewBatch()
	}
	for _, d := range newer {
		b := batches[0]
		if parts > 1 {
			b = batches[partOf(d.PlaceID, parts)]
		}
		if err := b.Index(d.PlaceID, document(d)); err != nil {
			return fmt.Errorf("bleveindex: upsert %s: %w", d.PlaceID, err)
		}
	}
	last := batches[len(batches)-1]
	if parts > 1 {
		errs := make([]error, parts)
		var wg sync.WaitGroup
		for i, b := range batches {
			wg.Go(func() { errs[i] = g.batch(b) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("bleveindex: upsert: %w", err)
		}
		last = g.bleve.NewBatch()
	}
	for _, id := range deleteIDs {
		last.Delete(id)
	}
	last.SetInternal([]byte(checkpointKey), []byte(checkpoint))
	before, _ := g.bleve.GetInternal([]byte(checkpointKey))
	if err := g.batch(last); err != nil && (string(before) == checkpoint || !g.took(checkpoint)) {
		return fmt.Errorf("bleveindex: upsert: %w", err)
	}
	for _, d := range newer {
		if d.Version > 0 {
			g.versions[d.PlaceID] = d.Version
		}
	}
	for _, id := range deleteIDs {
		delete(g.versions, id)
	}
	g.points.apply(newer, deleteIDs)
	g.ranking.apply(newer, deleteIDs)
	return nil
}

// batch applies b. Until bleve has written a segment its write failed on (DATA_DIR's disk full),
// a batch replacing documents of that segment panics inside bleve (as searches of it do, see
// search): an error of this batch, applied again once bleve has written the segment.
func (g *generation) batch(b *bleve.Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bleve failed: %v (is DATA_DIR's disk full?)", r)
		}
	}()
	return g.bleve.Batch(b)
}

// took reports whether bleve took the batch that stores checkpoint (one the index did not hold
// before it, which upsert checks), though its Batch failed:
// bleve puts a batch in the index it serves before it writes it to disk, and a write that fails
// (DATA_DIR's disk full) fails the Batch with the batch in the index, its checkpoint too, and
// bleve retrying the write on its own. Such a batch is applied: offered again, it would be
// skipped as applied (its checkpoint reached), so the grid and the ranking take it now, and
// the index on disk, its checkpoint written with its documents, catches up once bleve can
// write (docs/operations.md, "DATA_DIR's disk full").
func (g *generation) took(checkpoint string) bool {
	v, err := g.bleve.GetInternal([]byte(checkpointKey))
	return err == nil && string(v) == checkpoint
}

func (g *generation) list(ctx context.Context, q placeindex.ListQuery) (placeindex.Result, error) {
	limit, offset := placeindex.Page(q.Limit, q.Offset)
	var filter query.Query
	if q.TownPrefix != "" {
		p := bleve.NewPrefixQuery(q.TownPrefix)
		p.SetField(fieldTownSlug)
		filter = p
	}
	text, err := textQuery(g.bleve.Mapping(), q.Q)
	if err != nil {
		return placeindex.Result{}, fmt.Errorf("bleveindex: %w", err)
	}
	if text == nil {
		return g.ranking.list(q.TownPrefix, limit, offset), nil
	}

	// The town is a filter so that it narrows matches without adding to their score.
	root := bleve.NewBooleanQuery()
	root.AddMust(text)
	root.AddFilter(filter)
	// The page is kept by qPage, in qOrder; bleve counts the matches.
	page := newQPage(limit, offset)
	req := bleve.NewSearchRequestOptions(root, limit, offset, false)
	req.SortBy([]string{"-_score"})
	res, err := g.search(page.context(ctx), req)
	if err != nil {
		return placeindex.Result{}, fmt.Errorf("bleveindex: list: %w", err)
	}
	hits := make([]placeindex.Hit, len(page.ids))
	for i, id := range page.ids {
		hits[i] = placeindex.Hit{PlaceID: id}
	}
	return placeindex.Result{Hits: hits, Total: int(res.Total)}, nil
}

// search runs req. While DATA_DIR's disk is full, bleve's search of a segment it failed to write
// panics (a cache of the segment cleared by the failed write) until the segment is written: the
// index cannot answer now, domain.ErrUnavailable, which the read API answers 503 charging
// nothing, not the 500 of a bug (docs/operations.md, "DATA_DIR's disk full").
func (g *generation) search(ctx context.Context, req *bleve.SearchRequest) (res *bleve.SearchResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("%w (the place index's search failed: %v; is DATA_DIR's disk full?)", domain.ErrUnavailable, r)
		}
	}()
	return g.bleve.SearchInContext(ctx, req)
}

// loadMemory fills the grid and the ranking from the stored documents,
// paging through them in place_id order.
func (g *generation) loadMemory() error {
	fields := []string{fieldCategory, fieldLat, fieldLng, fieldTownSlug, fieldRatingCount, fieldVersion}
	var after []string
	for {
		req := bleve.NewSearchRequestOptions(bleve.NewMatchAllQuery(), loadPage, 0, false)
		req.Fields = fields
		req.SortBy([]string{"_id"})
		if after != nil {
			req.SetSearchAfter(after)
		}
		res, err := g.bleve.Search(req)
		if err != nil {
			return fmt.Errorf("bleveindex: loading %s: %w", g.name, err)
		}
		for _, h := range res.Hits {
			town, _ := h.Fields[fieldTownSlug].(string)
			rating, _ := h.Fields[fieldRatingCount].(float64)
			g.ranking.put(ranked{id: h.ID, town: town, rating: int(rating)})
			if v, ok := h.Fields[fieldVersion].(float64); ok {
				g.versions[h.ID] = int64(v)
			}
			lat, okLat := h.Fields[fieldLat].(float64)
			lng, okLng := h.Fields[fieldLng].(float64)
			if !okLat || !okLng {
				continue
			}
			category, _ := h.Fields[fieldCategory].(string)
			g.points.put(point{id: h.ID, lat: lat, lng: lng, category: category})
		}
		if len(res.Hits) < loadPage {
			return nil
		}
		after = []string{res.Hits[len(res.Hits)-1].ID}
	}
}

func genName(n int) string { return fmt.Sprintf("%s%06d", genPrefix, n) }

func genNumber(name string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(name, genPrefix))
	if err != nil || !strings.HasPrefix(name, genPrefix) {
		return 0, fmt.Errorf("bleveindex: bad generation name %q", name)
	}
	return n, nil
}

func readCurrent(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, currentFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("bleveindex: %w", err)
	}
	name := strings.TrimSpace(string(b))
	if _, err := genNumber(name); err != nil {
		return "", err
	}
	return name, nil
}

// writeCurrent replaces CURRENT atomically: write a temporary file, sync it,
// rename it over the old one and sync the directory.
func writeCurrent(dir, name string) error {
	if err := durable.WriteFile(filepath.Join(dir, currentFile), []byte(name+"\n"), 0o644); err != nil {
		return fmt.Errorf("bleveindex: writing %s: %w", currentFile, err)
	}
	return nil
}

func removeOtherGenerations(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("bleveindex: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), genPrefix) && e.Name() != keep {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("bleveindex: removing stale %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}
