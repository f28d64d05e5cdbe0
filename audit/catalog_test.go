package audit_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/demodata"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// The catalog's read models (what place detail, lists, search, hidden gems, towns and events
// serve) are compared with the newest import of each record: a row changed, removed, set back
// to an older import, or a chain flag the names do not explain, is a difference naming the
// record. The demo catalog (menus, review summaries, sources with trust windows), imported
// twice, audits clean first.
func TestAnAlteredCatalogReadModelIsADifference(t *testing.T) {
	for _, c := range []struct{ name, sql, diff string }{
		{"a place's name and list row", `UPDATE rm_places SET name = 'Stale Name',
			row_json = replace(row_json, 'Ann''s Pies', 'Stale Name') WHERE place_id = 'plc_1'`,
			`place plc_1: the catalog read model has name "Stale Name", its import v2`},
		{"a place's stored detail", `UPDATE rm_places SET detail_json = replace(detail_json, '"field_trust"', '"field_trust_"')
			WHERE place_id = (SELECT min(place_id) FROM rm_places WHERE place_id LIKE 'plc\_%' ESCAPE '\' AND place_id <> 'plc_1' AND place_id <> 'plc_2')`,
			`the catalog read model has detail_json`},
		{"a place's imported document", `UPDATE rm_places SET doc = replace(doc, 'Grill', 'Grille') WHERE place_id = 'plc_2'`,
			`place plc_2: the catalog read model has doc …ce_id\":\"plc_2\",\"name\":\"Mae's Grille`},
		{"a place removed", `DELETE FROM rm_places WHERE place_id = 'plc_2'`,
			`place plc_2: missing from the catalog read model (its import v1`},
		{"a place of an older import", `UPDATE rm_places SET version = 1, town_slug = 'paducah' WHERE place_id = 'plc_1'`,
			`place plc_1: the catalog read model holds v1, its newest import at or before its checkpoint is v2`},
		{"a place no import wrote", `INSERT INTO rm_places SELECT 'plc_ghost', town_slug, name, normalized_name || ' ghost', category, is_gem,
			marked_chain, is_chain, local_gem_score, rating, rating_count, latitude, longitude, doc, has_menu, has_review, version,
			updated_at, row_json, detail_json, trust_from, trust_until, menu_json, menu_items, reviews_json FROM rm_places WHERE place_id = 'plc_2'`,
			`place plc_ghost: in the catalog read model, but no import of it is at or before its checkpoint`},
		{"a chain flag", `UPDATE rm_places SET is_chain = true WHERE place_id = 'plc_2'`,
			`place plc_2: the catalog read model has is_chain true, but it was imported with is_chain false`},
		{"a town renamed", `UPDATE rm_towns SET name = 'Nowhere' WHERE slug = 'berea'`,
			`town berea: the catalog read model has name "Nowhere", its import v3`},
		{"an event moved", `UPDATE rm_events SET start_date = start_date + interval '30 days' WHERE event_id = 'ev_1'`,
			`event ev_1: the catalog read model has start_date 2026-12-31T10:00:00.123456Z, its import v1`},
		{"an event's document", `UPDATE rm_events SET doc = jsonb_set(doc, '{title}', '"Other"') WHERE event_id = 'ev_1'`,
			`event ev_1: the catalog read model's doc differs from its import v1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := pgtest.NewPool(t)
			newWorld(t, pool, 5)
			imp := commands.ImportCatalog{Store: eventstore.New(pool), Clock: func() time.Time { return noon }}
			var demo bytes.Buffer
			if _, err := demodata.Write(&demo, demodata.Config{Places: 40, Today: noon.Truncate(24 * time.Hour)}); err != nil {
				t.Fatal(err)
			}
			for _, batch := range []string{
				demo.String(),
				`{"record":"town","slug":"berea","name":"Berea"}
{"record":"place","place_id":"plc_1","name":"Joe's Diner","category":"food.diner","town_slug":"berea"}
{"record":"place","place_id":"plc_2","name":"Mae's Grill","category":"food.grill","town_slug":"berea","is_gem":true,"local_gem_score":0.9}`,
				`{"record":"place","place_id":"plc_1","name":"Ann's Pies","category":"food.bakery","town_slug":"berea"}`,
				demo.String(), // every demo record again: its second version
			} {
				if _, err := imp.Handle(ctx, strings.NewReader(batch), eventstore.Metadata{}); err != nil {
					t.Fatal(err)
				}
			}
			// An event imported before the import refused a start_date finer than a microsecond
			// (docs/limits.md): the read model holds it cut to microseconds, which audits clean.
			town, start := "berea", time.Date(2026, 12, 1, 10, 0, 0, 123456700, time.UTC)
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				stream := domain.CalendarEventStream("ev_1")
				heads, err := eventstore.OpenHeads(ctx, tx, true, stream)
				if err != nil {
					return err
				}
				_, err = eventstore.Append(ctx, tx, heads[stream], noon, eventstore.NewEvent{Type: domain.EventCalendarEventImported,
					Payload: domain.CalendarEvent{EventID: "ev_1", Title: "Fair", EventType: "festival", StartDate: start, TownSlug: &town}})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			catchUp(t, pool)
			if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
				t.Fatalf("consistent catalog: %s", out)
			}
			tamper(t, pool, c.sql)
			rep, out := run(t, pool, audit.Options{})
			if len(rep.Differences) == 0 || !strings.Contains(out, c.diff) {
				t.Errorf("after %s: %s\nwant a DIFF containing %q", c.name, out, c.diff)
			}
		})
	}
}

// Rows the read API serves by rendering their document are compared for what it serves:
// rows stored before views existed (migration 0011 left their views NULL), and rows whose
// detail migration 0019 marked as holding for no instant (a trust window ending in 1970).
// Both audit clean, and a wrong column they do serve is still a difference.
func TestPlacesTheReadAPIRendersFromTheirDocumentAuditForWhatItServes(t *testing.T) {
	for _, c := range []struct{ name, legacy string }{
		{"stored before views", `UPDATE rm_places SET row_json = NULL, detail_json = NULL, trust_from = NULL,
			trust_until = NULL, menu_json = NULL, menu_items = 0, reviews_json = NULL`},
		{"detail marked by migration 0019", `UPDATE rm_places SET trust_from = NULL, trust_until = '1970-01-01T00:00:00Z'
			WHERE detail_json IS NOT NULL`},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := demoCatalog(t, 30)
			tamper(t, pool, c.legacy)
			if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
				t.Fatalf("places the read API renders from their document: %s", out)
			}
			tamper(t, pool, `UPDATE rm_places SET category = 'food.other' WHERE place_id = (SELECT min(place_id) FROM rm_places)`)
			if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 1 || !strings.Contains(out, "has category \"food.other\"") {
				t.Fatalf("a wrong category on such a row: %s", out)
			}
		})
	}
}

// Migration 0011 turned rm_places.doc from jsonb into text: a row stored before it keeps the
// document as jsonb printed it (keys reordered, spaces after colons), not the imported
// bytes. The read API decodes that document, so it serves the place as imported, and the
// audit of a database carried over from before 0011 is clean; a document that says something
// else is still a difference.
func TestAPlaceDocumentStoredAsJSONBBeforeMigration0011AuditsClean(t *testing.T) {
	pool := demoCatalog(t, 30)
	// What migration 0011 left of a row the catalog projection wrote before it.
	tamper(t, pool, `UPDATE rm_places SET doc = doc::jsonb::text, row_json = NULL, detail_json = NULL, trust_from = NULL,
		trust_until = NULL, menu_json = NULL, menu_items = 0, reviews_json = NULL`)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatalf("places stored before migration 0011: %s", out)
	}
	tamper(t, pool, `UPDATE rm_places SET doc = jsonb_set(doc::jsonb, '{name}', '"Other Name"')::text
		WHERE place_id = (SELECT min(place_id) FROM rm_places)`)
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 1 || !strings.Contains(out, "has doc") {
		t.Fatalf("a document of another name on such a row: %s", out)
	}
}

// demoCatalog is a fresh database holding a demo catalog of n places, imported at noon, its
// read models caught up.
func demoCatalog(t *testing.T, n int) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	imp := commands.ImportCatalog{Store: eventstore.New(pool), Clock: func() time.Time { return noon }}
	var demo bytes.Buffer
	if _, err := demodata.Write(&demo, demodata.Config{Places: n, Today: noon.Truncate(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := imp.Handle(ctx, &demo, eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	catchUp(t, pool)
	return pool
}
