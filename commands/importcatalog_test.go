package commands_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/demodata"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

var catalogNow = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

func catalogDemo(t testing.TB, places int) ([]byte, demodata.Stats) {
	t.Helper()
	var buf bytes.Buffer
	stats, err := demodata.Write(&buf, demodata.Config{Places: places, Today: catalogNow})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), stats
}

func catalogImporter(pool *pgxpool.Pool) commands.ImportCatalog {
	return commands.ImportCatalog{Store: eventstore.New(pool), Clock: func() time.Time { return catalogNow }}
}

func catalogCount(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestImportingTheDemoCatalogAppendsOneEventPerRecord(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	data, stats := catalogDemo(t, 300)
	res, err := catalogImporter(pool).Handle(ctx, bytes.NewReader(data), eventstore.Metadata{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	want := commands.ImportResult{Towns: stats.Towns, Places: stats.Places, Events: stats.Events,
		Created: stats.Towns + stats.Places + stats.Events}
	if res != want {
		t.Fatalf("result %+v, want %+v", res, want)
	}
	for typ, n := range map[string]int{
		domain.EventTownImported: stats.Towns, domain.EventPlaceImported: stats.Places, domain.EventCalendarEventImported: stats.Events,
	} {
		if got := catalogCount(t, pool, `SELECT count(*) FROM events WHERE type = $1 AND version = 1`, typ); got != n {
			t.Errorf("%d %s events, want %d", got, typ, n)
		}
	}
	c, _ := domain.ParseCatalog(bytes.NewReader(data))
	evs, err := eventstore.ReadStream(ctx, pool, domain.PlaceStream(c.Places[0].PlaceID), 0)
	if err != nil || len(evs) != 1 || evs[0].Metadata.Actor != "test" || !evs[0].RecordedAt.Equal(catalogNow) {
		t.Fatalf("stream of the first place: %+v, %v", evs, err)
	}
}

func TestReimportingIsAnUpdateAtTheNextVersion(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	data, stats := catalogDemo(t, 300)
	h := catalogImporter(pool)
	if _, err := h.Handle(ctx, bytes.NewReader(data), eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	res, err := h.Handle(ctx, bytes.NewReader(data), eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	total := stats.Towns + stats.Places + stats.Events
	if res.Created != 0 || res.Updated != total {
		t.Fatalf("second import %+v, want %d updated", res, total)
	}
	if got := catalogCount(t, pool, `SELECT count(*) FROM events WHERE version = 2`); got != total {
		t.Errorf("%d events at version 2, want %d", got, total)
	}
	if got := catalogCount(t, pool, `SELECT count(*) FROM (SELECT stream_no, version FROM events GROUP BY 1, 2 HAVING count(*) > 1) d`); got != 0 {
		t.Errorf("%d duplicate stream versions", got)
	}
	if got := catalogCount(t, pool, `SELECT count(DISTINCT stream_no) FROM events`); got != total {
		t.Errorf("%d streams, want %d", got, total)
	}
}

func TestABadLineFailsTheWholeBatchAndWritesNothing(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	data, _ := catalogDemo(t, 300)
	h := catalogImporter(pool)
	if _, err := h.Handle(ctx, bytes.NewReader(data), eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	before := catalogCount(t, pool, `SELECT count(*) FROM events`)

	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var placeLine int
	for i, l := range lines {
		if strings.Contains(l, `"record":"place"`) {
			placeLine = i
			break
		}
	}
	// Put a place with latitude 123 on line 5.
	bad := strings.Replace(lines[placeLine], `"latitude":`, `"latitude":123,"was":`, 1)
	batch := append(append(append([]string{}, lines[:4]...), bad), lines[4:]...)
	_, err := h.Handle(ctx, strings.NewReader(strings.Join(batch, "\n")), eventstore.Metadata{})
	var ie *domain.ImportError
	if !errors.As(err, &ie) || ie.Line != 5 || ie.Field != "latitude" {
		t.Fatalf("got %v, want an ImportError on line 5, field latitude", err)
	}
	if after := catalogCount(t, pool, `SELECT count(*) FROM events`); after != before {
		t.Fatalf("events went from %d to %d", before, after)
	}
}

func TestFlatAndNestedLinesBothImport(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	in := strings.Join([]string{
		`{"record":"town","slug":"berea","name":"Berea"}`,
		`{"record":"town","town":{"slug":"paducah","name":"Paducah","county":"McCracken"}}`,
		`{"record":"place","place_id":"plc_a","name":"A","category":"food"}`,
		`{"record":"place","place":{"place_id":"plc_b","name":"B","category":"food","town_slug":"paducah"}}`,
		`{"record":"event","event_id":"evt_a","title":"A","start_date":"2026-12-01T10:00:00Z"}`,
		`{"record":"event","event":{"event_id":"evt_b","title":"B","start_date":"2026-12-02T10:00:00-05:00"}}`,
	}, "\n")
	res, err := catalogImporter(pool).Handle(ctx, strings.NewReader(in), eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if res != (commands.ImportResult{Towns: 2, Places: 2, Events: 2, Created: 6}) {
		t.Fatalf("result %+v", res)
	}
	evs, err := eventstore.ReadStream(ctx, pool, domain.TownStream("paducah"), 0)
	if err != nil || len(evs) != 1 || !strings.Contains(string(evs[0].Payload), `"county":"McCracken"`) {
		t.Fatalf("paducah stream %v %v", evs, err)
	}
}

func TestConcurrentImportsOfTheSameRecordsBothLand(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	data, stats := catalogDemo(t, 300)
	h := catalogImporter(pool)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := h.Handle(ctx, bytes.NewReader(data), eventstore.Metadata{})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	total := stats.Towns + stats.Places + stats.Events
	if got := catalogCount(t, pool, `SELECT count(*) FROM events WHERE version = 2`); got != total {
		t.Fatalf("%d events at version 2, want %d", got, total)
	}
}

// BenchmarkImportCatalog20k imports (then re-imports, as updates) a 20,000-place demo
// catalog: go test -run '^$' -bench ImportCatalog -benchtime 3x ./commands/
func BenchmarkImportCatalog20k(b *testing.B) {
	pool := pgtest.NewPool(b)
	data, _ := catalogDemo(b, 20000)
	lines := bytes.Count(data, []byte("\n"))
	h := catalogImporter(pool)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := h.Handle(context.Background(), bytes.NewReader(data), eventstore.Metadata{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(lines*b.N)/b.Elapsed().Seconds(), "records/s")
}

// Two imports creating the same new records, listed in opposite orders: the streams are
// created in id order, so neither waits for the other's while holding what the other waits for.
func TestConcurrentImportsOfNewRecordsInOppositeOrdersBothLand(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	h := catalogImporter(pool)
	for round := range 5 {
		var fwd, rev []string
		for i := range 2000 {
			fwd = append(fwd, fmt.Sprintf(`{"record":"place","place_id":"plc_r%d_%d","name":"P%d","category":"food"}`, round, i, i))
		}
		for i := len(fwd) - 1; i >= 0; i-- {
			rev = append(rev, fwd[i])
		}
		errs := make(chan error, 2)
		for _, lines := range [][]string{fwd, rev} {
			go func() {
				_, err := h.Handle(ctx, strings.NewReader(strings.Join(lines, "\n")), eventstore.Metadata{})
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// `kyapi import a.ndjson b.ndjson` (HandleBatches) locks each file's heads as it gets to the
// file, so its locks are not taken in one stream order. An admin import of both records
// (Handle, locking in stream order) that arrives between the files must still land.
// kyapi import locks each file's records when it reaches the file, so across its files not in
// stream order: beside an admin import of the same records they can deadlock. PostgreSQL ends
// one of them, and WithTx runs it again: both land.
func TestAMultiFileImportAndAnAdminImportOfTheSameRecordsBothLand(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	h := catalogImporter(pool)
	lineB := `{"record":"place","place_id":"plc_b","name":"B","category":"food"}`
	lineA := `{"record":"place","place_id":"plc_a","name":"A","category":"food"}`
	// plc_b's stream gets the lower stream number.
	for _, l := range []string{lineB, lineA} {
		if _, err := h.Handle(ctx, strings.NewReader(l), eventstore.Metadata{}); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{lineA, lineB}
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cli := make(chan error, 1)
	go func() {
		_, err := h.HandleBatches(ctx, 2, func(i int) (io.ReadCloser, error) {
			if i == 1 {
				// file 0 (plc_a) is appended and its head locked. The deadlock's retry
				// opens the files again: only the first pass signals.
				once.Do(func() { close(reached) })
				<-release
			}
			return io.NopCloser(strings.NewReader(files[i])), nil
		}, eventstore.Metadata{})
		cli <- err
	}()
	<-reached
	admin := make(chan error, 1)
	go func() {
		_, err := h.Handle(ctx, strings.NewReader(lineA+"\n"+lineB), eventstore.Metadata{})
		admin <- err
	}()
	// Let the admin import take plc_b and wait for plc_a.
	for catalogCount(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 0 {
		time.Sleep(10 * time.Millisecond) // until the admin import waits for the CLI's lock
	}
	close(release)
	if err := <-cli; err != nil {
		t.Errorf("kyapi import: %v", err)
	}
	if err := <-admin; err != nil {
		t.Errorf("admin import: %v", err)
	}
}

// Statements are bounded by their payloads' bytes as well as by their events: lines of 1 MiB
// (the most an import line holds) by the thousand made one statement over the 1 GiB a
// PostgreSQL message can carry. Here the bound is a few kilobytes, so the demo catalog is
// written in hundreds of statements, and lands whole, each stream chained, as in one.
func TestAnImportIsWrittenInStatementsBoundedByBytes(t *testing.T) {
	defer commands.SetCatalogWriteBytes(4 << 10)()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	data, stats := catalogDemo(t, 300)
	for round, want := range []commands.ImportResult{
		{Towns: stats.Towns, Places: stats.Places, Events: stats.Events, Created: stats.Towns + stats.Places + stats.Events},
		{Towns: stats.Towns, Places: stats.Places, Events: stats.Events, Updated: stats.Towns + stats.Places + stats.Events},
	} {
		res, err := catalogImporter(pool).Handle(ctx, bytes.NewReader(data), eventstore.Metadata{Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if res != want {
			t.Fatalf("import %d: %+v, want %+v", round+1, res, want)
		}
	}
	if n := catalogCount(t, pool, `SELECT count(*) FROM events`); n != 2*(stats.Towns+stats.Places+stats.Events) {
		t.Fatalf("%d events, want two per record", n)
	}
	if n := catalogCount(t, pool, `SELECT count(*) FROM streams WHERE version <> 2`); n != 0 {
		t.Fatalf("%d streams not at version 2", n)
	}
	rep, err := audit.Run(ctx, pool, audit.Options{})
	if err != nil || len(rep.Differences) != 0 {
		t.Fatalf("audit: %+v, %v", rep, err)
	}
}
