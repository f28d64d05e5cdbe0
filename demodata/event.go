package demodata

import (
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

type eventRecord struct {
	Record       string  `json:"record"`
	EventID      string  `json:"event_id"`
	Title        string  `json:"title"`
	EventType    string  `json:"event_type"`
	StartDate    string  `json:"start_date"`
	EndDate      *string `json:"end_date"`
	TownSlug     *string `json:"town_slug"`
	VenuePlaceID *string `json:"venue_place_id"`

	start time.Time
}

// statewideEvents have no town: they happen across Kentucky or online.
var statewideEvents = []struct{ title, kind string }{
	{"Kentucky Arts Council Open Studios Weekend", "arts"},
	{"Kentucky Proud Farmers Market Week", "market"},
	{"Commonwealth Clean Streams Day", "community"},
	{"Statewide Bluegrass Radio Hour", "music"},
	{"Bourbon Heritage Virtual Tasting", "food"},
}

// eventStart is the local hour each kind of event usually begins.
var eventStart = map[string]int{
	"music": 19, "festival": 10, "market": 8, "sports": 8, "arts": 18, "food": 18, "community": 10,
}

// eventVenue is the kind of place each kind of event is held at.
var eventVenue = map[string]venueKind{
	"music": venueStage, "festival": venueGrounds, "market": venueGrounds, "sports": venueGrounds,
	"arts": venueArts, "food": venueFood, "community": venueGrounds,
}

// writeEvents schedules EventCount events over the next eventHorizonDays days and
// writes them in start order. Bigger towns hold more events, but by the square root of
// population, so small towns still get their festivals.
func (g *generator) writeEvents() error {
	r := g.rng
	cum := make([]float64, len(g.towns))
	sum := 0.0
	for i, t := range g.towns {
		sum += math.Sqrt(float64(t.Population)) + 1
		cum[i] = sum
	}

	events := make([]eventRecord, 0, EventCount)
	for i := range EventCount {
		e := eventRecord{Record: "event", EventID: makeID("evt_", g.cfg.Seed, idEvent, i)}
		if r.Float64() < 0.04 {
			s := pick(r, statewideEvents)
			e.Title, e.EventType = s.title, s.kind
		} else {
			e.EventType = pick(r, eventTypes)
			ti := min(sort.SearchFloat64s(cum, r.Float64()*sum), len(g.towns)-1)
			t := g.towns[ti]
			e.TownSlug = ptr(t.Slug)
			title := pick(r, eventTitles[e.EventType])
			if v, ok := g.venueFor(ti, eventVenue[e.EventType]); ok && r.Float64() < 0.7 {
				e.VenuePlaceID = ptr(v.id)
				e.Title = title + " at " + v.name
			} else {
				e.Title = postalName(t) + " " + title
			}
		}

		// Kentucky is UTC-5 in winter and UTC-4 in summer; +5 keeps local times sensible.
		local := eventStart[e.EventType] + r.IntN(3)
		e.start = g.today.AddDate(0, 0, r.IntN(eventHorizonDays)).
			Add(time.Duration(local+5)*time.Hour + time.Duration(30*r.IntN(2))*time.Minute)
		e.StartDate = e.start.Format(time.RFC3339)
		switch {
		case e.EventType == "festival":
			end := e.start.AddDate(0, 0, r.IntN(3)).Add(time.Duration(22-local) * time.Hour)
			e.EndDate = ptr(end.Format(time.RFC3339))
		case r.Float64() < 0.85:
			e.EndDate = ptr(e.start.Add(time.Duration(2+r.IntN(3)) * time.Hour).Format(time.RFC3339))
		}
		events = append(events, e)
	}

	slices.SortStableFunc(events, func(a, b eventRecord) int {
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		return strings.Compare(a.EventID, b.EventID)
	})
	for _, e := range events {
		if err := g.enc.Encode(e); err != nil {
			return err
		}
		g.stats.Events++
	}
	return nil
}

// venueFor picks one of the town's places that can host this kind of event.
func (g *generator) venueFor(town int, kind venueKind) (venue, bool) {
	var fits []venue
	for _, v := range g.venues[town] {
		if v.kind == kind {
			fits = append(fits, v)
		}
	}
	if len(fits) == 0 {
		return venue{}, false
	}
	return pick(g.rng, fits), true
}
