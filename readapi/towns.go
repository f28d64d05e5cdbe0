package readapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
)

// eventsDefaultDays is the length of the default events window after from.
const eventsDefaultDays = 90

// towns answers GET /api/data/towns: every town, by slug.
func (s *Server) towns(w http.ResponseWriter, r *http.Request, c caller) error {
	rows, err := s.Pool.Query(r.Context(), `SELECT slug, name, county, population FROM rm_towns ORDER BY slug COLLATE "C"`)
	if err != nil {
		return fmt.Errorf("towns: %w", err)
	}
	towns, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.Town, error) {
		var t domain.Town
		err := row.Scan(&t.Slug, &t.Name, &t.County, &t.Population)
		return t, err
	})
	if err != nil {
		return fmt.Errorf("towns: %w", err)
	}
	return serveList(s, w, r, c, domain.OpTowns, domain.TownsResource, towns)
}

// events answers GET /api/data/events: events starting from `from` to `to` inclusive (UTC
// days), optionally in one town, by start_date.
func (s *Server) events(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	town := ResolveTown(q.Get("town"))
	today, _ := time.Parse(time.DateOnly, domain.Day(s.now()))
	from, err := dateParam(q, "from", today)
	if err != nil {
		return err
	}
	to, err := dateParam(q, "to", from.AddDate(0, 0, eventsDefaultDays))
	if err != nil {
		return err
	}
	if from.After(to) {
		if _, given := lookup(q, "from"); !given {
			return httpx.BadParam("to", "must not be before from, which defaults to today (%s) when not given", from.Format(time.DateOnly))
		}
		return httpx.BadParam("from", "must not be after to")
	}
	rows, err := s.Pool.Query(r.Context(), `
		SELECT doc FROM rm_events
		WHERE start_date >= $1 AND start_date < $2
		  AND ($3 = '' OR town_slug LIKE $3 || '%')
		ORDER BY start_date, event_id COLLATE "C"`, from, to.AddDate(0, 0, 1), likePrefix(town))
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.CalendarEvent, error) {
		var doc []byte
		var e domain.CalendarEvent
		if err := row.Scan(&doc); err != nil {
			return e, err
		}
		if err := json.Unmarshal(doc, &e); err != nil {
			return e, err
		}
		// Catalog dates are served in UTC (docs/limits.md, "Catalog import"), whatever offset
		// the import gave them with; the stored record keeps it as imported.
		e.StartDate = e.StartDate.UTC()
		if e.EndDate != nil {
			end := e.EndDate.UTC()
			e.EndDate = &end
		}
		return e, nil
	})
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	// The column holds start_date to the microsecond; events imported before the import cut
	// finer ones to it (docs/limits.md) serve theirs to the nanosecond: the list is in the
	// order of the start_date it serves, ties as the query ordered them.
	slices.SortStableFunc(events, func(a, b domain.CalendarEvent) int { return a.StartDate.Compare(b.StartDate) })
	resource := domain.EventsResource(town, from.Format(time.DateOnly), to.Format(time.DateOnly))
	return serveList(s, w, r, c, domain.OpEvents, resource, events)
}
