package elasticindex_test

// Generations shared by several processes. Every serving process opens its own Index on one
// alias (internal/app OpenIndex), and `kyapi rebuild` may run while they serve: no process may
// trust the generation it opened, delete the generation the alias points at, or leave an
// empty generation claiming a checkpoint.
//
// No Elasticsearch server can run on this machine, so these tests run against fakeCluster
// (fakecluster_test.go), a fake server that reproduces the Elasticsearch 8 behaviours they
// rely on, listed there with the API each comes from: deleting an index deletes its aliases;
// a bulk into a missing index auto-creates it, unless require_alias refuses it; bulk items
// name the concrete index they landed in; update-aliases is atomic and fails whole on a
// "remove" of an alias that is not there; a create fails with resource_already_exists and
// adds the aliases of its body with the index; get-alias answers 404 for a missing alias.
// The contract suite (TestContract) runs against a real Elasticsearch 8 when
// ELASTICSEARCH_URL is set.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
)

func rebuildTo(t *testing.T, idx interface {
	Rebuild(context.Context, func(placeindex.Writer) error) error
}, cp string) {
	t.Helper()
	ctx := context.Background()
	err := idx.Rebuild(ctx, func(w placeindex.Writer) error {
		return w.Upsert(ctx, []placeindex.Doc{{PlaceID: "p1", Name: "One", Category: "food"}}, nil, cp)
	})
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
}

var two = []placeindex.Doc{{PlaceID: "p2", Name: "Two", Category: "food"}}

// After another process's Rebuild swapped the alias and deleted the generation this process
// opened, its upserts still reach the generation readers query, and never re-create the
// deleted one (which Elasticsearch would auto-create with a dynamic mapping).
func TestUpsertAfterAnotherProcessRebuiltLandsInTheLiveGeneration(t *testing.T) {
	f := liveAt3()
	url := f.serve(t)
	server := f.open(t, url)  // a serving process
	rebuild := f.open(t, url) // `kyapi rebuild`
	rebuildTo(t, rebuild, "cp-9")

	if err := server.Upsert(context.Background(), two, nil, "cp-10"); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	if last, live := f.lastBulkInto(), f.aliasTarget("places"); last != live {
		t.Errorf("the upsert went into %s; readers query %s", last, live)
	}
	if f.exists("places-3") {
		t.Errorf("the deleted generation places-3 was re-created by the upsert")
	}
}

// Checkpoint answers for the generation the alias points at now, not the one opened: else a
// process whose generation was swapped out reads a deleted checkpoint ("") and replays the
// whole store into an orphan.
func TestCheckpointAfterAnotherProcessRebuiltIsTheLiveGenerations(t *testing.T) {
	f := liveAt3()
	url := f.serve(t)
	server := f.open(t, url)
	rebuildTo(t, f.open(t, url), "cp-9")

	cp, err := server.Checkpoint(context.Background())
	if err != nil || cp != "cp-9" {
		t.Errorf("Checkpoint() = %q, %v; want cp-9, the checkpoint of the generation the alias serves", cp, err)
	}
}

// A process that read its checkpoint from the old generation chose its batch from there. If
// another process's Rebuild swapped in a generation that stops earlier, storing the batch's
// checkpoint for the new generation would claim events it never received: the documents go
// in, the new generation's checkpoint stays, and the caller's next Checkpoint says where to
// resume.
func TestUpsertNeverMovesTheCheckpointOfAGenerationItsCallerDidNotRead(t *testing.T) {
	ctx := context.Background()
	f := liveAt3()
	url := f.serve(t)
	server := f.open(t, url)
	if err := server.Upsert(ctx, two, nil, "cp-10"); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	if cp, err := server.Checkpoint(ctx); err != nil || cp != "cp-10" {
		t.Fatalf("Checkpoint() = %q, %v; want cp-10", cp, err)
	}
	rebuildTo(t, f.open(t, url), "cp-9") // filled up to cp-9 only; places-4 is live

	if err := server.Upsert(ctx, two, nil, "cp-11"); err != nil { // the batch (cp-10, cp-11]
		t.Fatalf("Upsert: %v", err)
	}
	if cp, _ := f.checkpoint("places-4"); cp != "cp-9" {
		t.Errorf("places-4's checkpoint = %q after a batch chosen from places-3's; want cp-9 (it lacks (cp-9, cp-10])", cp)
	}
	if cp, err := server.Checkpoint(ctx); err != nil || cp != "cp-9" {
		t.Fatalf("Checkpoint() = %q, %v; want cp-9", cp, err)
	}
	if err := server.Upsert(ctx, two, nil, "cp-11"); err != nil { // the batch (cp-9, cp-11]
		t.Fatalf("Upsert: %v", err)
	}
	if cp, _ := f.checkpoint("places-4"); cp != "cp-11" {
		t.Errorf("places-4's checkpoint = %q after a batch chosen from its own; want cp-11", cp)
	}
}

// Without an alias to write through (its generation was deleted), an upsert fails and stores
// no checkpoint rather than create an index or count deletes into a missing one as done;
// the next Checkpoint starts a fresh generation, empty, for the caller to replay into.
func TestUpsertWithoutAliasFailsAndCheckpointStartsAFreshGeneration(t *testing.T) {
	ctx := context.Background()
	f := liveAt3()
	idx := f.open(t, f.serve(t))
	f.mu.Lock()
	f.deleteIndex("places-3") // an operator, say; the alias goes with it
	f.mu.Unlock()

	if err := idx.Upsert(ctx, two, nil, "cp-9"); err == nil {
		t.Errorf("Upsert of documents without an alias succeeded")
	}
	if err := idx.Upsert(ctx, nil, []string{"p1"}, "cp-10"); err == nil {
		t.Errorf("Upsert of deletes without an alias succeeded")
	}
	if f.exists("places-3") {
		t.Errorf("the upsert re-created the deleted places-3")
	}
	if cp, _ := f.checkpoint("places-3"); cp != "cp-8" {
		t.Errorf("places-3's checkpoint moved to %q", cp)
	}
	cp, err := idx.Checkpoint(ctx)
	if live := f.aliasTarget("places"); err != nil || cp != "" || live == "" || !f.exists(live) {
		t.Errorf("Checkpoint() = %q, %v with the alias on %q; want \"\" and a fresh generation", cp, err, live)
	}
}

// A Rebuild from a process that opened an older generation fills a generation that does not
// exist yet; it never takes the live one for a leftover and deletes it (with the alias).
func TestRebuildFromAStaleProcessNeverDeletesTheLiveGeneration(t *testing.T) {
	f := liveAt3()
	url := f.serve(t)
	stale := f.open(t, url)
	rebuildTo(t, f.open(t, url), "cp-9") // alias now on places-4

	boom := errors.New("replay failed")
	if err := stale.Rebuild(context.Background(), func(placeindex.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Rebuild = %v, want %v", err, boom)
	}
	if live := f.aliasTarget("places"); live != "places-4" || !f.exists(live) {
		t.Errorf("after a failed rebuild the alias serves %q (exists: %v); want places-4 still serving", live, f.exists(live))
	}
	if deleted := f.deletedIndexes(); slices.Contains(deleted, "places-4") {
		t.Errorf("the failed rebuild deleted the live places-4 (deleted: %v)", deleted)
	}
}

// A stale process's Rebuild that succeeds swaps the alias away from the generation that is
// live at the end of its fill, whichever that is.
func TestRebuildFromAStaleProcessSwapsFromTheLiveGeneration(t *testing.T) {
	f := liveAt3()
	url := f.serve(t)
	stale := f.open(t, url)
	rebuildTo(t, f.open(t, url), "cp-9") // alias now on places-4

	rebuildTo(t, stale, "cp-10")
	if live := f.aliasTarget("places"); live != "places-5" {
		t.Errorf("alias on %q, want places-5", live)
	}
	if got := strings.Join(f.indexNames(), " "); got != "places-5 places-checkpoint" {
		t.Errorf("indexes %s, want places-5 places-checkpoint", got)
	}
	if cp, err := stale.Checkpoint(context.Background()); err != nil || cp != "cp-10" {
		t.Errorf("Checkpoint() = %q, %v; want cp-10", cp, err)
	}
}

// The swap reached Elasticsearch but its answer was lost (a proxy's 504; the client's retry
// then finds the alias gone from the old generation): the swap is committed, and the new
// generation, now live, is kept.
func TestRebuildWhoseSwapAnswerIsLostIsCommitted(t *testing.T) {
	f := liveAt3()
	idx := f.open(t, f.serve(t))
	f.mu.Lock()
	f.aliasAppliedThen504 = true
	f.mu.Unlock()
	ctx := context.Background()
	err := idx.Rebuild(ctx, func(w placeindex.Writer) error {
		return w.Upsert(ctx, two, nil, "cp-9")
	})
	live := f.aliasTarget("places")
	if err != nil || live != "places-4" || !f.exists(live) {
		t.Errorf("Rebuild = %v with the alias on %q (exists: %v); want nil and places-4 serving", err, live, f.exists(live))
	}
	if cp, err := idx.Checkpoint(ctx); err != nil || cp != "cp-9" {
		t.Errorf("Checkpoint() = %q, %v; want cp-9", cp, err)
	}
}

// A fresh generation starts from an empty checkpoint: a checkpoint document left by a former
// generation of the same name must not make the empty index claim to be caught up.
func TestOpenWithoutAliasStartsFromAnEmptyCheckpoint(t *testing.T) {
	f := newFakeCluster()
	f.checkpoints["places-1"] = "cp-8" // places-1 and its alias are gone
	idx := f.open(t, f.serve(t))
	cp, err := idx.Checkpoint(context.Background())
	if err != nil || cp != "" {
		t.Errorf("Checkpoint() on a freshly created empty generation = %q, %v; want \"\" so the projection replays from 0", cp, err)
	}
	if live := f.aliasTarget("places"); live != "places-1" {
		t.Errorf("alias on %q, want places-1", live)
	}
	if !strings.Contains(f.body("PUT /places-1"), `"aliases":{"places":{}}`) {
		t.Errorf("places-1 was created without the alias in its create body: %s", f.body("PUT /places-1"))
	}
}

// Two processes opening a prefix that has no alias yet end up on the same generation: the
// one that finds the index created meanwhile uses it, and deletes nothing.
func TestOpenRacingAnotherOpenUsesTheGenerationItCreated(t *testing.T) {
	f := newFakeCluster()
	f.onAliasMissing = func(f *fakeCluster) { // the other process creates places-1 with the alias and writes
		f.indices["places-1"] = true
		f.aliases["places"] = map[string]bool{"places-1": true}
		f.checkpoints["places-1"] = "cp-5"
	}
	idx := f.open(t, f.serve(t))
	if live := f.aliasTarget("places"); live != "places-1" {
		t.Errorf("alias on %q, want places-1", live)
	}
	if deleted := f.deletedIndexes(); len(deleted) > 0 {
		t.Errorf("Open deleted %v, the generation the other process created and serves", deleted)
	}
	if cp, err := idx.Checkpoint(context.Background()); err != nil || cp != "cp-5" {
		t.Errorf("Checkpoint() = %q, %v; want cp-5, the other process's", cp, err)
	}
}

// A generation deleted while Rebuild fills it (another process's cleanup, an operator) fails
// the fill; writing by name would auto-create it with a dynamic mapping and swap that in.
func TestRebuildFailsRatherThanRecreateAGenerationDeletedUnderIt(t *testing.T) {
	f := liveAt3()
	idx := f.open(t, f.serve(t))
	f.onBulk = func(f *fakeCluster, target string) {
		if strings.HasPrefix(target, "places-4") && f.indices["places-4"] {
			f.deleteIndex("places-4")
		}
	}
	ctx := context.Background()
	err := idx.Rebuild(ctx, func(w placeindex.Writer) error {
		return w.Upsert(ctx, two, nil, "cp-9")
	})
	if err == nil {
		t.Errorf("Rebuild succeeded though its generation was deleted during the fill")
	}
	if live := f.aliasTarget("places"); live != "places-3" {
		t.Errorf("alias on %q, want places-3 still serving", live)
	}
	if f.exists("places-4") {
		t.Errorf("the fill re-created the deleted places-4")
	}
}

// A Rebuild that committed removes every older generation the alias does not point at,
// including one a rebuild that crashed after its swap left behind, and nothing of another
// prefix such as places-eu.
func TestRebuildRemovesOlderGenerationsLeftBehind(t *testing.T) {
	f := newFakeCluster()
	for _, index := range []string{"places-2", "places-3", "places-4", "places-eu-1", "places-eu-checkpoint"} {
		f.indices[index] = true
	}
	f.aliases["places"] = map[string]bool{"places-4": true} // places-2 and -3: crashed rebuilds
	f.aliases["places-eu"] = map[string]bool{"places-eu-1": true}
	f.checkpoints["places-3"], f.checkpoints["places-4"] = "cp-7", "cp-8"
	rebuildTo(t, f.open(t, f.serve(t)), "cp-9")

	if got := strings.Join(f.indexNames(), " "); got != "places-5 places-checkpoint places-eu-1 places-eu-checkpoint" {
		t.Errorf("indexes after rebuild: %s; want places-5 places-checkpoint places-eu-1 places-eu-checkpoint", got)
	}
	if live := f.aliasTarget("places-eu"); live != "places-eu-1" {
		t.Errorf("places-eu alias on %q, want places-eu-1", live)
	}
	for _, gone := range []string{"places-3", "places-4"} {
		if cp, ok := f.checkpoint(gone); ok {
			t.Errorf("checkpoint of removed %s left behind: %q", gone, cp)
		}
	}
}

// Drop deletes this prefix's generations and checkpoint index, and nothing of another prefix
// that "<prefix>-*" also matches.
func TestDropDeletesOnlyThisPrefix(t *testing.T) {
	f := liveAt3()
	for _, index := range []string{"places-eu-2", "places-eu-checkpoint", "places-4"} {
		f.indices[index] = true
	}
	f.aliases["places-eu"] = map[string]bool{"places-eu-2": true}
	idx := f.open(t, f.serve(t))
	if err := idx.Drop(context.Background()); err != nil {
		t.Fatalf("Drop: %v", err)
	}
	if got := strings.Join(f.indexNames(), " "); got != "places-eu-2 places-eu-checkpoint" {
		t.Errorf("indexes after Drop: %s; want places-eu-2 places-eu-checkpoint", got)
	}
}

func TestRebuildFillsThroughItsOwnAliasThenSwapsAndRemovesTheOldGeneration(t *testing.T) {
	f := liveAt3()
	idx := f.open(t, f.serve(t))
	f.resetRequests()
	ctx := context.Background()
	err := idx.Rebuild(ctx, func(w placeindex.Writer) error {
		return w.Upsert(ctx, []placeindex.Doc{{PlaceID: "p1", Name: "One", Category: "food", Location: &placeindex.GeoPoint{Lat: 38, Lng: -84}}}, []string{"p0"}, "cp-9")
	})
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	want := []string{
		"GET /_alias/places",
		"GET /places-*/_alias",
		"PUT /places-4",
		"DELETE /places-checkpoint/_doc/places-4",
		"POST /places-4-fill/_bulk",
		"PUT /places-checkpoint/_doc/places-4",
		"POST /places-4/_refresh",
		"GET /_alias/places",
		"POST /_aliases",
		"GET /places-*/_alias",
		"POST /_aliases",
		"DELETE /places-checkpoint/_doc/places-3",
	}
	if got := f.recorded(); !slices.Equal(got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := f.body("PUT /places-4"); !strings.Contains(got, `"aliases":{"places-4-fill":{}}`) || !strings.Contains(got, `"mappings":`) {
		t.Errorf("create body of places-4 = %s; want the mapping and the fill alias", got)
	}
	// The swap, then the old generation deleted only while the alias is still on the new one.
	if got := f.bodiesOf("POST /_aliases"); !slices.Equal(got, []string{
		`{"actions":[{"remove":{"alias":"places","index":"places-3","must_exist":true}},{"add":{"alias":"places","index":"places-4"}},{"remove":{"alias":"places-4-fill","index":"places-4"}}]}`,
		`{"actions":[{"remove_index":{"index":"places-3"}},{"remove":{"alias":"places","index":"places-4","must_exist":true}},{"add":{"alias":"places","index":"places-4"}}]}`,
	}) {
		t.Errorf("aliases bodies:\n%s", strings.Join(got, "\n"))
	}
	bulk := f.body("POST /places-4-fill/_bulk")
	for _, want := range []string{`{"index":{"_id":"p1"}}`, `"location":{"lat":38,"lon":-84}`, `{"delete":{"_id":"p0"}}`} {
		if !strings.Contains(bulk, want) {
			t.Errorf("bulk body lacks %s:\n%s", want, bulk)
		}
	}
	if cp, _ := f.checkpoint("places-4"); cp != "cp-9" {
		t.Errorf("checkpoint of places-4 = %q, want cp-9", cp)
	}
	if live := f.aliasTarget("places"); live != "places-4" {
		t.Errorf("alias on %q, want places-4", live)
	}
	if got := f.aliasNamesOf("places-4"); !slices.Equal(got, []string{"places"}) {
		t.Errorf("places-4 carries the aliases %v; want places only", got)
	}

	f.resetRequests()
	if err := idx.Upsert(ctx, two, nil, "cp-10"); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	if got := f.recorded(); len(got) == 0 || got[0] != "POST /places/_bulk" || f.lastBulkInto() != "places-4" {
		t.Errorf("upsert after rebuild sent %v into %s, want POST /places/_bulk into places-4", got, f.lastBulkInto())
	}
	if cp, _ := f.checkpoint("places-4"); cp != "cp-10" {
		t.Errorf("checkpoint of places-4 = %q, want cp-10", cp)
	}
}

// Two rebuilds run at once (Rebuild may run beside another): R1 fills places-4, R2 fills
// places-5 and swaps first. R2's cleanup takes places-4 for a leftover; R1 then swaps the alias
// onto places-4 before R2 deletes it. Deleting must not take the generation the alias serves
// by then (and the alias with it): servers would then serve an empty generation they create.
func TestConcurrentRebuildsNeverDeleteTheGenerationTheAliasServes(t *testing.T) {
	f := liveAt3()
	releaseR1 := make(chan struct{})
	r1Swapped := make(chan struct{})
	var pause, swapped sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		deletes4 := r.Method == http.MethodDelete && r.URL.Path == "/places-4" ||
			r.Method == http.MethodPost && r.URL.Path == "/_aliases" && strings.Contains(string(body), `"remove_index":{"index":"places-4"}`)
		if deletes4 {
			pause.Do(func() { // R2's cleanup waits while R1's fill ends and R1 swaps
				close(releaseR1)
				<-r1Swapped
			})
		}
		f.ServeHTTP(w, r)
		if r.URL.Path == "/_aliases" && !strings.Contains(string(body), "remove_index") &&
			strings.Contains(string(body), `{"add":{"alias":"places","index":"places-4"}}`) {
			swapped.Do(func() { close(r1Swapped) })
		}
	}))
	t.Cleanup(srv.Close)
	r1, r2 := f.open(t, srv.URL), f.open(t, srv.URL)
	ctx := context.Background()
	r1Filling := make(chan struct{})
	r1Done := make(chan error, 1)
	go func() {
		r1Done <- r1.Rebuild(ctx, func(w placeindex.Writer) error {
			if err := w.Upsert(ctx, two, nil, "cp-9"); err != nil {
				return err
			}
			close(r1Filling)
			<-releaseR1
			return nil
		})
	}()
	<-r1Filling
	err2 := r2.Rebuild(ctx, func(w placeindex.Writer) error { return w.Upsert(ctx, two, nil, "cp-10") })
	err1 := <-r1Done
	live := f.aliasTarget("places")
	if err1 != nil || live != "places-4" || !f.exists(live) {
		t.Errorf("R1 = %v, R2 = %v: the alias serves %q (exists: %v; indexes %v, deleted %v); want places-4, R1's, swapped in last",
			err1, err2, live, f.exists(live), f.indexNames(), f.deletedIndexes())
	}
	// What a serving process reads next: the checkpoint of the generation R1 filled.
	if cp, err := f.open(t, srv.URL).Checkpoint(ctx); err != nil || cp != "cp-9" {
		t.Errorf("a server's Checkpoint() = %q, %v; want cp-9, places-4's", cp, err)
	}
}
