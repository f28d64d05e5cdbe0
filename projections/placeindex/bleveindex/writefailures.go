package bleveindex

import (
	"path/filepath"
	"sync"
	"time"

	"github.com/blevesearch/bleve/v2/index/scorch"
)

// bleve writes the index to disk on goroutines of its own (its persister and merger), and
// retries a write that failed (DATA_DIR's disk full) until it succeeds, meanwhile serving what
// it was given from memory. Those failures reach nobody unless a callback is registered for
// them: bleveCallbacks is the name of ours, given in each generation's bleve config.
const bleveCallbacks = "kyapi-bleveindex"

// writeReportEvery is the least time between two reports of failed writes: bleve retries a
// failed write at once, again and again, for as long as the disk stays full.
const writeReportEvery = time.Minute

// retryPause is how long bleve's goroutine waits after each failed write before it retries:
// left alone it retries at once, a core spent writing and removing a segment file for as long
// as the disk stays full.
const retryPause = 250 * time.Millisecond

func init() {
	scorch.RegistryAsyncErrorCallbacks[bleveCallbacks] = func(err error, path string) {
		if w := watched.byPath(path); w != nil {
			w.failed(err)
		}
		time.Sleep(retryPause)
	}
	scorch.RegistryEventCallbacks[bleveCallbacks] = func(e scorch.Event) bool {
		if e.Kind == scorch.EventKindPersisterProgress {
			if w := watched.byIndex(e.Scorch); w != nil {
				w.wrote()
			}
		}
		return true
	}
}

// bleveConfig is the config every generation is created and opened with.
func bleveConfig() map[string]any {
	return map[string]any{"asyncErrorCallbackName": bleveCallbacks, "eventCallbackName": bleveCallbacks}
}

// writeReport tells report (ReportWriteFailures) of the writes bleve failed: the first failure at
// once, then at most one every writeReportEvery with the count of those left unreported, and,
// with a nil error, the first write that succeeds after a failure reported. The minute runs on
// across that success: a disk nearly full fails bleve's merges while the small writes between
// them succeed, and each success would otherwise have the next failure reported at once.
type writeReport struct {
	mu          sync.Mutex
	report      func(err error, notReported int)
	failing     bool // a failure was reported, and no write that succeeded since
	lastAt      time.Time
	notReported int
}

func (w *writeReport) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.lastAt.IsZero() && time.Since(w.lastAt) < writeReportEvery {
		w.notReported++
		return
	}
	if w.report != nil {
		w.report(err, w.notReported)
	}
	w.failing, w.lastAt, w.notReported = true, time.Now(), 0
}

func (w *writeReport) wrote() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.failing {
		return
	}
	if w.report != nil {
		w.report(nil, w.notReported)
	}
	w.failing, w.lastAt, w.notReported = false, time.Now(), 0
}

// watched finds the writeReport of the generation whose bleve index calls back. The callbacks
// run on bleve's goroutines, which Close waits for: they take no lock but this one's.
var watched = &watchList{paths: map[string]*writeReport{}, indexes: map[any]*writeReport{}}

type watchList struct {
	mu      sync.Mutex
	paths   map[string]*writeReport // by the directory of a generation's bleve store
	indexes map[any]*writeReport    // by a generation's *scorch.Scorch
}

// watch has g's bleve callbacks reported to g.writes, until unwatch.
func (l *watchList) watch(g *generation) {
	ix, err := g.bleve.Advanced()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paths[filepath.Join(g.dir, g.name, "store")] = g.writes
	if err == nil {
		l.indexes[ix] = g.writes
	}
}

func (l *watchList) unwatch(g *generation) {
	ix, err := g.bleve.Advanced()
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.paths, filepath.Join(g.dir, g.name, "store"))
	if err == nil {
		delete(l.indexes, ix)
	}
}

func (l *watchList) byPath(path string) *writeReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paths[filepath.Clean(path)]
}

func (l *watchList) byIndex(ix any) *writeReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.indexes[ix]
}
