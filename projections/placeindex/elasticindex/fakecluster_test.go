package elasticindex_test

// No Elasticsearch server can run on this machine, so the tests of how the adapter's
// generations behave when several processes share one alias run against fakeCluster: a
// small HTTP server keeping the state those tests need (indexes, aliases, checkpoint
// documents) and reproducing the Elasticsearch 8 behaviours they rely on:
//
//   - deleting an index also removes its aliases (delete index API);
//   - deleting a missing index with ignore_unavailable=true succeeds;
//   - creating an index whose name exists fails with 400 resource_already_exists_exception,
//     and the aliases in a create body are added together with the index (create index API);
//   - a bulk index action into a missing index creates it (action.auto_create_index defaults
//     to true), while with require_alias=true an action whose target is not an alias fails
//     with a per-item 404 index_not_found_exception and nothing is created (bulk API);
//   - bulk items name the concrete index each action landed in ("_index"), also when it was
//     written through an alias; deleting a missing document is a 404 "not_found" item, and a
//     delete into a missing index a 404 index_not_found_exception item (deletes create none);
//   - update-aliases applies its actions atomically, all or none; every "remove_index" runs
//     before the "add" and "remove" actions wherever it sits, and deletes the index with its
//     aliases; a "remove_index" of a missing index fails the whole call with 404
//     index_not_found_exception, of an alias with 400; a "remove" of an alias the index does
//     not carry fails it with 404 aliases_not_found_exception (with must_exist true, and
//     without must_exist, as Elasticsearch 8 answers; must_exist false skips the action); an
//     "add" to a missing index fails it with 404 index_not_found_exception (aliases API);
//   - GET (and HEAD) /_alias/<name> answers 404 when no index carries the alias, and
//     GET /<pattern>/_alias and GET /<pattern> list every index the pattern matches by its
//     name or an alias's (get alias and get index APIs);
//   - GET of a missing document answers 404 {"found":false}, of a document of a missing index
//     404 index_not_found_exception (get API);
//   - refreshing a missing index fails with 404 index_not_found_exception.
//
// What the documents mean (mappings, analysis, queries) is not modelled: the contract suite
// (placeindextest, TestContract) checks that against a real Elasticsearch 8 when
// ELASTICSEARCH_URL is set.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex/elasticindex"
)

type fakeCluster struct {
	mu          sync.Mutex
	indices     map[string]bool
	aliases     map[string]map[string]bool // alias → indexes carrying it
	checkpoints map[string]string          // checkpoint documents by id (a generation's name)
	bulkInto    []string                   // concrete index each bulk landed in
	deleted     []string                   // indexes deleted, in order
	requests    []string                   // "METHOD /path"
	bodies      map[string]string          // last body per "METHOD /path"
	allBodies   map[string][]string        // every body per "METHOD /path", in order

	// aliasAppliedThen504 makes the next update-aliases call apply and then answer 504, as a
	// proxy or load balancer does when Elasticsearch answers after its timeout.
	aliasAppliedThen504 bool
	// onAliasMissing, when set, runs once (holding the lock) the first time GET /_alias/places
	// finds no alias: another process acting between that answer and the caller's next step.
	onAliasMissing func(f *fakeCluster)
	// onBulk, when set, runs (holding the lock) before each bulk is applied, with its target.
	onBulk func(f *fakeCluster, target string)
	// searchFails, when its status is set, is what every search answers: a cluster up but
	// unable to serve (red, its queues full, a gateway's page in front of it).
	searchFails struct {
		status            int
		contentType, body string
	}
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{
		indices:     map[string]bool{"places-checkpoint": true},
		aliases:     map[string]map[string]bool{},
		checkpoints: map[string]string{},
		bodies:      map[string]string{},
		allBodies:   map[string][]string{},
	}
}

// liveAt3 is a cluster whose alias serves places-3, caught up to cp-8.
func liveAt3() *fakeCluster {
	f := newFakeCluster()
	f.indices["places-3"] = true
	f.aliases["places"] = map[string]bool{"places-3": true}
	f.checkpoints["places-3"] = "cp-8"
	return f
}

func (f *fakeCluster) serve(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (f *fakeCluster) open(t *testing.T, url string) *elasticindex.Index {
	t.Helper()
	idx, err := elasticindex.Open(context.Background(), url, "places")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return idx
}

// aliasTarget is where an alias points: "" when nowhere, "a,b" when at several indexes.
func (f *fakeCluster) aliasTarget(alias string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(slices.Sorted(maps.Keys(f.aliases[alias])), ",")
}

func (f *fakeCluster) exists(index string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.indices[index]
}

func (f *fakeCluster) indexNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.indices))
}

func (f *fakeCluster) lastBulkInto() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bulkInto) == 0 {
		return ""
	}
	return f.bulkInto[len(f.bulkInto)-1]
}

func (f *fakeCluster) checkpoint(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cp, ok := f.checkpoints[id]
	return cp, ok
}

func (f *fakeCluster) deletedIndexes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deleted)
}

func (f *fakeCluster) aliasNamesOf(index string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.aliasesOf(index)))
}

func (f *fakeCluster) resetRequests() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = nil
}

func (f *fakeCluster) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func (f *fakeCluster) body(key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[key]
}

func (f *fakeCluster) bodiesOf(key string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.allBodies[key])
}

func (f *fakeCluster) aliasesOf(index string) map[string]struct{} {
	m := map[string]struct{}{}
	for alias, on := range f.aliases {
		if on[index] {
			m[alias] = struct{}{}
		}
	}
	return m
}

func (f *fakeCluster) deleteIndex(index string) {
	delete(f.indices, index)
	f.deleted = append(f.deleted, index)
	for alias, on := range f.aliases {
		delete(on, index) // deleting an index removes its aliases
		if len(on) == 0 {
			delete(f.aliases, alias)
		}
	}
}

func (f *fakeCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	key := r.Method + " " + r.URL.Path
	f.requests = append(f.requests, key)
	f.bodies[key] = string(body)
	f.allBodies[key] = append(f.allBodies[key], string(body))
	w.Header().Set("X-Elastic-Product", "Elasticsearch")
	w.Header().Set("Content-Type", "application/json")
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	reply := func(status int, body string) {
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
	esError := func(status int, typ, reason string) {
		reply(status, fmt.Sprintf(`{"error":{"root_cause":[],"type":%q,"reason":%q},"status":%d}`, typ, reason, status))
	}
	aliasMissing := func(name string) {
		if name == "places" && f.onAliasMissing != nil {
			hook := f.onAliasMissing
			f.onAliasMissing = nil
			hook(f)
		}
	}
	// listing answers GET /<pattern>/_alias and GET /<pattern>: a wildcard matches index
	// names and alias names, and an alias stands for its indexes.
	listing := func(pattern string, entry func(index string) any) {
		out := map[string]any{}
		for index := range f.indices {
			if ok, _ := path.Match(pattern, index); ok {
				out[index] = entry(index)
			}
		}
		for alias, on := range f.aliases {
			if ok, _ := path.Match(pattern, alias); ok {
				for index := range on {
					out[index] = entry(index)
				}
			}
		}
		b, _ := json.Marshal(out)
		reply(http.StatusOK, string(b))
	}
	switch {
	case r.Method == http.MethodHead && len(parts) == 2 && parts[0] == "_alias":
		if len(f.aliases[parts[1]]) == 0 {
			aliasMissing(parts[1])
			w.WriteHeader(http.StatusNotFound)
		} else {
			w.WriteHeader(http.StatusOK)
		}

	case r.Method == http.MethodHead && len(parts) == 1:
		if f.indices[parts[0]] || len(f.aliases[parts[0]]) > 0 {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusNotFound)
		}

	case r.Method == http.MethodGet && len(parts) == 2 && parts[0] == "_alias":
		name := parts[1]
		if len(f.aliases[name]) == 0 {
			aliasMissing(name)
			reply(http.StatusNotFound, fmt.Sprintf(`{"error":"alias [%s] missing","status":404}`, name))
			return
		}
		out := map[string]any{}
		for index := range f.aliases[name] {
			out[index] = map[string]any{"aliases": map[string]any{name: map[string]any{}}}
		}
		b, _ := json.Marshal(out)
		reply(http.StatusOK, string(b))

	case r.Method == http.MethodGet && len(parts) == 2 && parts[1] == "_alias":
		listing(parts[0], func(index string) any { return map[string]any{"aliases": f.aliasesOf(index)} })

	case r.Method == http.MethodGet && len(parts) == 1 && !strings.HasPrefix(parts[0], "_"):
		listing(parts[0], func(index string) any {
			return map[string]any{"aliases": f.aliasesOf(index), "mappings": map[string]any{}, "settings": map[string]any{}}
		})

	case r.Method == http.MethodPost && r.URL.Path == "/_aliases":
		var req struct {
			Actions []map[string]struct {
				Index, Alias string
				MustExist    *bool `json:"must_exist"`
			} `json:"actions"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			esError(http.StatusBadRequest, "parse_exception", err.Error())
			return
		}
		indices := maps.Clone(f.indices)
		next := map[string]map[string]bool{}
		for alias, on := range f.aliases {
			next[alias] = maps.Clone(on)
		}
		// Every remove_index runs first, wherever it sits among the actions; it deletes the
		// index and so its aliases.
		var removed []string
		for _, action := range req.Actions {
			a, ok := action["remove_index"]
			if !ok {
				continue
			}
			if len(next[a.Index]) > 0 {
				esError(http.StatusBadRequest, "illegal_argument_exception", "The provided expression ["+a.Index+"] matches an alias, specify the corresponding concrete indices instead.")
				return
			}
			if !indices[a.Index] {
				esError(http.StatusNotFound, "index_not_found_exception", "no such index ["+a.Index+"]")
				return
			}
			delete(indices, a.Index)
			removed = append(removed, a.Index)
			for alias, on := range next {
				delete(on, a.Index)
				if len(on) == 0 {
					delete(next, alias)
				}
			}
		}
		for _, action := range req.Actions {
			for verb, a := range action {
				switch verb {
				case "remove_index":
				case "add":
					if !indices[a.Index] {
						esError(http.StatusNotFound, "index_not_found_exception", "no such index ["+a.Index+"]")
						return
					}
					if next[a.Alias] == nil {
						next[a.Alias] = map[string]bool{}
					}
					next[a.Alias][a.Index] = true
				case "remove":
					if !next[a.Alias][a.Index] {
						if a.MustExist != nil && !*a.MustExist {
							continue
						}
						esError(http.StatusNotFound, "aliases_not_found_exception", "aliases ["+a.Alias+"] missing")
						return
					}
					delete(next[a.Alias], a.Index)
					if len(next[a.Alias]) == 0 {
						delete(next, a.Alias)
					}
				default:
					esError(http.StatusBadRequest, "illegal_argument_exception", "unexpected action "+verb)
					return
				}
			}
		}
		f.indices = indices
		f.deleted = append(f.deleted, removed...)
		f.aliases = next
		if f.aliasAppliedThen504 {
			f.aliasAppliedThen504 = false
			esError(http.StatusGatewayTimeout, "gateway_timeout", "upstream timed out")
			return
		}
		reply(http.StatusOK, `{"acknowledged":true}`)

	case len(parts) == 3 && parts[0] == "places-checkpoint" && parts[1] == "_doc":
		id := parts[2]
		if !f.indices["places-checkpoint"] {
			esError(http.StatusNotFound, "index_not_found_exception", "no such index [places-checkpoint]")
			return
		}
		switch r.Method {
		case http.MethodPut, http.MethodPost:
			var doc struct{ Checkpoint string }
			json.Unmarshal(body, &doc)
			f.checkpoints[id] = doc.Checkpoint
			reply(http.StatusOK, fmt.Sprintf(`{"_index":"places-checkpoint","_id":%q,"_version":1,"result":"updated","_shards":{"total":1,"successful":1,"failed":0},"_seq_no":1,"_primary_term":1}`, id))
		case http.MethodGet:
			cp, ok := f.checkpoints[id]
			if !ok {
				reply(http.StatusNotFound, fmt.Sprintf(`{"_index":"places-checkpoint","_id":%q,"found":false}`, id))
				return
			}
			reply(http.StatusOK, fmt.Sprintf(`{"_index":"places-checkpoint","_id":%q,"_version":1,"_seq_no":1,"_primary_term":1,"found":true,"_source":{"checkpoint":%q}}`, id, cp))
		case http.MethodDelete:
			_, ok := f.checkpoints[id]
			delete(f.checkpoints, id)
			result, status := "deleted", http.StatusOK
			if !ok {
				result, status = "not_found", http.StatusNotFound
			}
			reply(status, fmt.Sprintf(`{"_index":"places-checkpoint","_id":%q,"_version":2,"result":%q,"_shards":{"total":1,"successful":1,"failed":0},"_seq_no":2,"_primary_term":1}`, id, result))
		}

	case r.Method == http.MethodPost && len(parts) == 2 && parts[1] == "_bulk":
		f.bulk(w, parts[0], r.URL.Query().Get("require_alias") == "true", body)

	case r.Method == http.MethodPost && len(parts) == 2 && parts[1] == "_refresh":
		if !f.indices[parts[0]] && len(f.aliases[parts[0]]) == 0 {
			esError(http.StatusNotFound, "index_not_found_exception", "no such index ["+parts[0]+"]")
			return
		}
		reply(http.StatusOK, `{"_shards":{"total":1,"successful":1,"failed":0}}`)

	case r.Method == http.MethodPost && len(parts) == 2 && parts[1] == "_search" && f.searchFails.status != 0:
		w.Header().Set("Content-Type", f.searchFails.contentType)
		reply(f.searchFails.status, f.searchFails.body)

	case r.Method == http.MethodPost && len(parts) == 2 && parts[1] == "_search":
		reply(http.StatusOK, `{"took":1,"timed_out":false,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0},"hits":{"total":{"value":0,"relation":"eq"},"hits":[]}}`)

	case r.Method == http.MethodPut && len(parts) == 1:
		name := parts[0]
		if f.indices[name] {
			esError(http.StatusBadRequest, "resource_already_exists_exception", "index ["+name+"] already exists")
			return
		}
		var req struct {
			Aliases map[string]json.RawMessage `json:"aliases"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			esError(http.StatusBadRequest, "parse_exception", err.Error())
			return
		}
		f.indices[name] = true
		for alias := range req.Aliases {
			if f.aliases[alias] == nil {
				f.aliases[alias] = map[string]bool{}
			}
			f.aliases[alias][name] = true
		}
		reply(http.StatusOK, fmt.Sprintf(`{"acknowledged":true,"shards_acknowledged":true,"index":%q}`, name))

	case r.Method == http.MethodDelete && len(parts) == 1:
		if !f.indices[parts[0]] {
			if r.URL.Query().Get("ignore_unavailable") != "true" {
				esError(http.StatusNotFound, "index_not_found_exception", "no such index ["+parts[0]+"]")
				return
			}
		} else {
			f.deleteIndex(parts[0])
		}
		reply(http.StatusOK, `{"acknowledged":true}`)

	default:
		esError(http.StatusBadRequest, "fake_exception", "unexpected "+r.Method+" "+r.URL.Path)
	}
}

// bulk applies the actions of a bulk request to target (an alias or an index) the way
// Elasticsearch answers them; the documents themselves are not kept.
func (f *fakeCluster) bulk(w http.ResponseWriter, target string, requireAlias bool, body []byte) {
	if f.onBulk != nil {
		f.onBulk(f, target)
	}
	type item map[string]any
	var items []map[string]item
	index, failure, failed := target, "", false
	switch on := f.aliases[target]; {
	case len(on) == 1:
		index = slices.Collect(maps.Keys(on))[0]
	case len(on) > 1:
		failure = "no write index is defined for alias [" + target + "]"
	case requireAlias:
		failure = "no such index [" + target + "] and [require_alias] request flag is [true] and [" + target + "] is not an alias"
	}
	lines := bufio.NewScanner(bytes.NewReader(body))
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var action map[string]struct {
			ID string `json:"_id"`
		}
		if err := json.Unmarshal(lines.Bytes(), &action); err != nil || len(action) != 1 {
			continue
		}
		for op, meta := range action {
			if op == "index" {
				lines.Scan() // the document
			}
			it := item{"_index": index, "_id": meta.ID}
			switch {
			case failure != "":
				failed = true
				it["status"] = http.StatusNotFound
				it["error"] = map[string]any{"type": "index_not_found_exception", "reason": failure}
			case op == "index":
				if !f.indices[index] {
					f.indices[index] = true // action.auto_create_index
				}
				it["status"], it["result"] = http.StatusCreated, "created"
			case !f.indices[index]: // a delete creates no index
				it["status"] = http.StatusNotFound
				it["error"] = map[string]any{"type": "index_not_found_exception", "reason": "no such index [" + index + "]"}
				failed = true
			default:
				it["status"], it["result"] = http.StatusNotFound, "not_found"
			}
			items = append(items, map[string]item{op: it})
		}
	}
	if failure == "" && len(items) > 0 {
		f.bulkInto = append(f.bulkInto, index)
	}
	b, _ := json.Marshal(map[string]any{"took": 1, "errors": failed, "items": items})
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}
