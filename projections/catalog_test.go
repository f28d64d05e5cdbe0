package projections_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/demodata"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
)

var catalogNow = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

// catalogImport imports in and returns every event in the store.
func catalogImport(t testing.TB, pool *pgxpool.Pool, in []byte) []eventstore.Event {
	t.Helper()
	ctx := context.Background()
	h := commands.ImportCatalog{Store: eventstore.New(pool), Clock: func() time.Time { return catalogNow }}
	if _, err := h.Handle(ctx, bytes.NewReader(in), eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	// ReadAll holds back events until every older transaction of the cluster has ended,
	// and other tests share the cluster: wait until it shows all of them.
	total := catalogCount(t, pool, `SELECT count(*) FROM events`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		evs, err := eventstore.ReadAll(ctx, pool, eventstore.Position{}, 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == total {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("ReadAll shows %d of %d events", len(evs), total)
		}
	}
}

func catalogApply(t testing.TB, pool *pgxpool.Pool, evs []eventstore.Event) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		return projections.Catalog{Clock: func() time.Time { return catalogNow }}.Apply(context.Background(), tx, evs)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func catalogCount(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// catalogSnapshot is every row of the projection's tables, as text.
func catalogSnapshot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT coalesce(string_agg(t::text, E'\n' ORDER BY slug), '') FROM rm_towns t) ||
		(SELECT coalesce(string_agg(p::text, E'\n' ORDER BY place_id), '') FROM rm_places p) ||
		(SELECT coalesce(string_agg(e::text, E'\n' ORDER BY event_id), '') FROM rm_events e)`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTheCatalogProjectionHoldsEveryImportedRecord(t *testing.T) {
	pool := pgtest.NewPool(t)
	var buf bytes.Buffer
	stats, err := demodata.Write(&buf, demodata.Config{Places: 300, Today: catalogNow})
	if err != nil {
		t.Fatal(err)
	}
	evs := catalogImport(t, pool, buf.Bytes())
	catalogApply(t, pool, evs)

	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_towns`); n != stats.Towns {
		t.Errorf("%d towns, want %d", n, stats.Towns)
	}
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_places`); n != stats.Places {
		t.Errorf("%d places, want %d", n, stats.Places)
	}
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_events`); n != stats.Events {
		t.Errorf("%d events, want %d", n, stats.Events)
	}
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_places WHERE has_menu AND menu_items > 0
		AND jsonb_array_length(menu_json::jsonb) = menu_items AND menu_json::jsonb = doc::jsonb->'menu'`); n != stats.Menus {
		t.Errorf("%d places with a menu, want %d", n, stats.Menus)
	}
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_places WHERE has_review
		AND reviews_json::jsonb->>'summary' = doc::jsonb->'review_summary'->>'summary' AND reviews_json::jsonb->>'summary' <> ''`); n != stats.Reviews {
		t.Errorf("%d places with a review summary, want %d", n, stats.Reviews)
	}
	// Every place is stored ready to serve: its row, its detail and a trust window that
	// holds the instant of the projection.
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_places WHERE (row_json || '"x"' || detail_json)::jsonb->>'place_id' = place_id
		AND (trust_from IS NULL OR trust_from < $1) AND (trust_until IS NULL OR trust_until >= $1)
		AND (menu_json IS NULL) = (menu_items = 0) AND (menu_json IS NULL) <> has_menu AND (reviews_json IS NULL) <> has_review`, catalogNow); n != stats.Places {
		t.Errorf("%d places stored ready to serve, want %d", n, stats.Places)
	}
	// Every place marked as a chain is one, and every name at 3+ places is one.
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_places WHERE marked_chain AND NOT is_chain`); n != 0 {
		t.Errorf("%d marked chains not flagged", n)
	}
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_places p WHERE NOT is_chain AND
		(SELECT count(*) FROM rm_places q WHERE q.normalized_name = p.normalized_name) >= 3`); n != 0 {
		t.Errorf("%d places sharing a name with 2 others are not chains", n)
	}

	before := catalogSnapshot(t, pool)
	catalogApply(t, pool, evs)
	if after := catalogSnapshot(t, pool); after != before {
		t.Fatal("applying the same events twice changed the rows")
	}
}

func TestAReimportedPlaceReplacesItsRow(t *testing.T) {
	pool := pgtest.NewPool(t)
	line := `{"record":"place","place_id":"plc_a","name":"Joe's Diner","category":"food.restaurant","menu":[{"name":"Pie","price":3}]}`
	evs := catalogImport(t, pool, []byte(line))
	catalogApply(t, pool, evs)
	updated := strings.NewReplacer(`Joe's Diner`, `Joe's Grill`, `,"menu":[{"name":"Pie","price":3}]`, ``).Replace(line)
	evs = catalogImport(t, pool, []byte(updated))
	catalogApply(t, pool, evs[len(evs)-1:])

	var name, norm string
	var version int64
	var hasMenu bool
	err := pool.QueryRow(context.Background(), `SELECT name, normalized_name, version, has_menu FROM rm_places WHERE place_id = 'plc_a'`).
		Scan(&name, &norm, &version, &hasMenu)
	if err != nil {
		t.Fatal(err)
	}
	if name != "Joe's Grill" || norm != "joes grill" || version != 2 || hasMenu {
		t.Fatalf("row %q %q v%d menu %v; want the second import", name, norm, version, hasMenu)
	}
	// An older version applied late (a replay of the first batch) does not win.
	catalogApply(t, pool, evs[:1])
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_places WHERE name = 'Joe''s Grill'`); n != 1 {
		t.Fatal("an older event replaced the newer row")
	}
}

func TestThreePlacesWithOneNameAreChainsUntilOneIsRenamed(t *testing.T) {
	pool := pgtest.NewPool(t)
	in := strings.Join([]string{
		`{"record":"place","place_id":"p1","name":"Joe's Diner #1","category":"food"}`,
		`{"record":"place","place_id":"p2","name":"JOES DINER","category":"food"}`,
		`{"record":"place","place_id":"p3","name":"Joe's Diner No. 3","category":"food"}`,
		`{"record":"place","place_id":"p4","name":"Ann's Pies","category":"food","is_chain":true}`,
	}, "\n")
	evs := catalogImport(t, pool, []byte(in))
	catalogApply(t, pool, evs)
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_places WHERE is_chain`); n != 4 {
		t.Fatalf("%d chains, want 4", n)
	}
	evs = catalogImport(t, pool, []byte(`{"record":"place","place_id":"p3","name":"Mae's Diner","category":"food"}`))
	catalogApply(t, pool, evs[len(evs)-1:])
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_places WHERE is_chain`); n != 1 {
		t.Fatalf("%d chains after the rename, want only the marked one", n)
	}
}

func TestResetEmptiesTheCatalogTables(t *testing.T) {
	pool := pgtest.NewPool(t)
	evs := catalogImport(t, pool, []byte(`{"record":"town","slug":"berea","name":"Berea"}`))
	catalogApply(t, pool, evs)
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		return projections.Catalog{}.Reset(context.Background(), tx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_towns`); n != 0 {
		t.Fatalf("%d towns after reset", n)
	}
}

func TestPlaceDocsKeepTheLastImportOfEachPlace(t *testing.T) {
	lat, lng, n := 37.5, -84.3, 12
	desc, seo := "Pie since 1950.", "Joe's is a diner."
	p := domain.Place{PlaceRow: domain.PlaceRow{PlaceID: "p1", Name: "Joe's", Category: "food.diner", Latitude: &lat, Longitude: &lng, RatingCount: &n, SEODescription: &seo}}
	d := projections.PlaceDoc(p)
	if d.Location == nil || d.Location.Lat != lat || d.Description != "" || d.RatingCount != 12 || d.TownSlug != "" {
		t.Fatalf("doc %+v (the SEO description is not searched)", d)
	}
	p.Description = &desc
	if d := projections.PlaceDoc(p); d.Description != desc {
		t.Fatalf("description %q, want the place's own", d.Description)
	}

	pool := pgtest.NewPool(t)
	in := strings.Join([]string{
		`{"record":"town","slug":"berea","name":"Berea"}`,
		`{"record":"place","place_id":"p1","name":"Old","category":"food"}`,
		`{"record":"place","place_id":"p2","name":"Two","category":"food","town_slug":"berea"}`,
	}, "\n")
	catalogImport(t, pool, []byte(in))
	evs := catalogImport(t, pool, []byte(`{"record":"place","place_id":"p1","name":"New","category":"food"}`))
	docs, err := projections.PlaceDocsFromEvents(evs)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[0].PlaceID != "p1" || docs[0].Name != "New" || docs[1].TownSlug != "berea" || docs[0].Location != nil {
		t.Fatalf("docs %+v", docs)
	}
}

// The index decodes only the fields it keeps; what it gets must be what the whole place gives.
func TestPlaceDocsDecodedFromEventsEqualTheDocsOfTheWholePlaces(t *testing.T) {
	pool := pgtest.NewPool(t)
	var buf bytes.Buffer
	if _, err := demodata.Write(&buf, demodata.Config{Places: 2000, Today: catalogNow}); err != nil {
		t.Fatal(err)
	}
	evs := catalogImport(t, pool, buf.Bytes())
	docs, err := projections.PlaceDocsFromEvents(evs)
	if err != nil {
		t.Fatal(err)
	}
	var want []placeindex.Doc
	for _, e := range evs {
		if e.Type != domain.EventPlaceImported {
			continue
		}
		var p domain.Place
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		d := projections.PlaceDoc(p)
		d.Version = e.Version // the event's, not the place's
		want = append(want, d)
	}
	if len(want) != 2000 || !reflect.DeepEqual(docs, want) {
		t.Fatalf("%d docs from the events differ from the %d docs of the whole places", len(docs), len(want))
	}
	located, described := 0, 0
	for _, d := range docs {
		if d.Location != nil {
			located++
		}
		if d.Description != "" && d.TownSlug != "" && d.RatingCount > 0 {
			described++
		}
	}
	if located == 0 || described == 0 {
		t.Fatalf("the demo places should exercise every field: %d located, %d described", located, described)
	}
}

// BenchmarkCatalogApply20k applies the events of a 20,000-place import to the catalog
// read models: go test -run '^$' -bench CatalogApply -benchtime 3x ./projections/
func BenchmarkCatalogApply20k(b *testing.B) {
	pool := pgtest.NewPool(b)
	var buf bytes.Buffer
	if _, err := demodata.Write(&buf, demodata.Config{Places: 20000, Today: catalogNow}); err != nil {
		b.Fatal(err)
	}
	evs := catalogImport(b, pool, buf.Bytes())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		catalogApply(b, pool, evs)
	}
	b.ReportMetric(float64(len(evs)*b.N)/b.Elapsed().Seconds(), "events/s")
}

func TestTheNewestVersionWinsWhateverTheOrderOfEvents(t *testing.T) {
	pool := pgtest.NewPool(t)
	line := `{"record":"place","place_id":"plc_a","name":"First","category":"food"}`
	catalogImport(t, pool, []byte(line))
	evs := catalogImport(t, pool, []byte(strings.Replace(line, "First", "Second", 1)))
	catalogApply(t, pool, []eventstore.Event{evs[1], evs[0]})
	if n := catalogCount(t, pool, `SELECT count(*) FROM rm_places WHERE name = 'Second' AND version = 2`); n != 1 {
		t.Fatal("version 1 applied after version 2 in one batch won")
	}
}

// A rebuild reads each range while the one before is indexed; the generation it swaps in
// must answer exactly as an index fed batch by batch, up to the same checkpoint.
func TestARebuiltPlaceIndexAnswersAsTheIndexCaughtUpBatchByBatch(t *testing.T) {
	pool := pgtest.NewPool(t)
	var buf bytes.Buffer
	if _, err := demodata.Write(&buf, demodata.Config{Places: 300, Today: catalogNow}); err != nil {
		t.Fatal(err)
	}
	catalogImport(t, pool, buf.Bytes())
	catalogImport(t, pool, []byte(`{"record":"place","place_id":"ky-renamed","name":"Renamed Twice","category":"food","latitude":37.57,"longitude":-84.29}`+"\n"+
		`{"record":"place","place_id":"ky-renamed","name":"Renamed Thrice","category":"food","latitude":37.57,"longitude":-84.29}`))

	caught := projections.PlaceIndex{Pool: pool, Index: newIndex(t)}
	if _, err := projections.CatchUp(bg, pool, caught, 5000, nil); err != nil {
		t.Fatal(err)
	}
	rebuilt := projections.PlaceIndex{Pool: pool, Index: newIndex(t)}
	n, err := rebuilt.Rebuild(bg, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	// It reads the places (through events_sparse), and only them.
	places := catalogCount(t, pool, `SELECT count(*) FROM events WHERE type = 'PlaceImported'`)
	if n != places {
		t.Fatalf("the rebuild read %d events, the store holds %d places", n, places)
	}
	at1, err1 := caught.Checkpoint(bg)
	at2, err2 := rebuilt.Checkpoint(bg)
	if err1 != nil || err2 != nil || at1 != at2 || at1 == (eventstore.Position{}) {
		t.Fatalf("checkpoints %v (%v) and %v (%v)", at1, err1, at2, err2)
	}
	queries := []func(placeindex.Index) (placeindex.Result, error){
		func(i placeindex.Index) (placeindex.Result, error) {
			return i.List(bg, placeindex.ListQuery{Limit: 500})
		},
		func(i placeindex.Index) (placeindex.Result, error) {
			return i.List(bg, placeindex.ListQuery{Q: "renamed thrice", Limit: 500})
		},
		func(i placeindex.Index) (placeindex.Result, error) {
			return i.Near(bg, placeindex.GeoQuery{Center: placeindex.GeoPoint{Lat: 37.57, Lng: -84.29}, RadiusKm: 300, Limit: 500})
		},
	}
	for i, q := range queries {
		want, err1 := q(caught.Index)
		got, err2 := q(rebuilt.Index)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if want.Total == 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("query %d: the rebuilt index answers %d hits (%d in all), the caught-up one %d (%d)", i, len(got.Hits), got.Total, len(want.Hits), want.Total)
		}
	}
}

// Stored places are compressed with lz4 where the server has it (migration 0013): the catalog
// projection writes every place's document and views, and the read API reads them per request.
func TestStoredPlacesAreCompressedWithLz4WhereTheServerHasIt(t *testing.T) {
	pool := pgtest.NewPool(t)
	var buf bytes.Buffer
	if _, err := demodata.Write(&buf, demodata.Config{Places: 200, Today: catalogNow}); err != nil {
		t.Fatal(err)
	}
	catalogApply(t, pool, catalogImport(t, pool, buf.Bytes()))
	var lz4 bool
	if err := pool.QueryRow(bg, `SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'default_toast_compression'`).Scan(&lz4); err != nil {
		t.Fatal(err)
	}
	want := "pglz"
	if lz4 {
		want = "lz4"
	}
	var methods []string
	rows, err := pool.Query(bg, `SELECT DISTINCT pg_column_compression(doc) FROM rm_places WHERE pg_column_compression(doc) IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	if methods, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(methods) != 1 || methods[0] != want {
		t.Fatalf("documents compressed with %v, want only %s", methods, want)
	}
}

// newIndex is an empty embedded place index in a temporary directory.
func newIndex(t *testing.T) placeindex.Index {
	t.Helper()
	idx, err := bleveindex.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	return idx
}

// The catalog decodes place payloads with a faster decoder than encoding/json (decodePlace):
// for every demo place, and for payloads at the edges of JSON, it must give what encoding/json
// gives, and refuse what it refuses.
func TestAPlacePayloadDecodesAsEncodingJSONDecodesIt(t *testing.T) {
	pool := pgtest.NewPool(t)
	var buf bytes.Buffer
	if _, err := demodata.Write(&buf, demodata.Config{Places: 2000, Today: catalogNow}); err != nil {
		t.Fatal(err)
	}
	var payloads [][]byte
	for _, e := range catalogImport(t, pool, buf.Bytes()) {
		if e.Type == domain.EventPlaceImported {
			payloads = append(payloads, e.Payload)
		}
	}
	if len(payloads) != 2000 {
		t.Fatalf("%d place events, want 2000", len(payloads))
	}
	edges := []string{
		`{"place_id":"plc_1","name":"Caf\u00e9 \"Ol\u00e9\" \ud83c\udf54","category":"food","town_slug":null,"latitude":null}`,
		`{"place_id":"plc_2","name":"bad \ud800 surrogate","rating":4.999999999999999,"rating_count":0}`,
		`{"place_id":"plc_3","name":"x","name":"duplicate keys: the last wins","PLACE_ID":"case folds"}`,
		`{"place_id":"plc_4","sources":{"phone":[{"source":"a","value":1e300,"observed_at":"2026-11-25T10:00:00.123456Z"},` +
			`{"source":"b","value":{"nested":[1,"two",null,true]},"observed_at":"2026-11-25T10:00:00Z"},` +
			`{"source":"c","value":-0.0,"observed_at":"2026-11-25T10:00:00+02:00"}]}}`,
		`{"place_id":"plc_5","menu":[{"name":"Burgoo","price":6.5,"description":null}],"hours":{"mon":[]},"unknown":{"a":[1,2]}}`,
		`{"place_id":"plc_6","name":"tab\there, nul \u0000 and line\nbreak"}` + "  \n",
		"{\"place_id\":\"plc_7\",\"name\":\"raw invalid UTF-8: \xff\xfe\"}",
		`{"place_id":"plc_8","rating_count":1.5}`,
		`{"place_id":"plc_9","latitude":"36.1"}`,
		`{"place_id":"plc_10",}`,
		`{"place_id":"plc_11"} trailing`,
		`[]`,
		``,
	}
	for _, e := range edges {
		payloads = append(payloads, []byte(e))
	}
	for i, p := range payloads {
		var want, got domain.Place
		wantErr := json.Unmarshal(p, &want)
		gotErr := projections.DecodePlace(p, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("payload %d %.80q: encoding/json says %v, decodePlace says %v", i, p, wantErr, gotErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("payload %d %.80q decodes to\n%+v\nnot as encoding/json does to\n%+v", i, p, got, want)
		}
	}
}
