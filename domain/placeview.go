package domain

import (
	"encoding/json"
	"time"
)

// PlaceView is a place rendered as the read API serves it (docs/api.md, "Places"). The catalog
// projection renders it once per import and stores the bytes; the read API then writes them
// into its responses without decoding a document per request.
//
// canonical_url is left out: its base is the serving process's setting (CANONICAL_BASE_URL),
// so Row stops just before its value and Detail starts just after it. A list row is
// Row + the quoted URL + "}"; a place detail is Row + the quoted URL + Detail.
type PlaceView struct {
	Row    []byte // `{"place_id":…,"seo_description":…,"canonical_url":`
	Detail []byte // `,"hours":…,"field_trust":{…}}`: what place detail adds, closing brace included
	// Detail's field_trust depends on the time of the request: it holds for now in
	// (TrustFrom, TrustUntil]. Nil is unbounded on that side.
	TrustFrom, TrustUntil *time.Time
	Menu                  []byte // the menu's items as a JSON array; nil when the place has none
	MenuItems             int
	Reviews               []byte // the review summary as served; nil when the place has none
}

// TrustHolds reports whether Detail's field_trust is the one of instant now.
func (v PlaceView) TrustHolds(now time.Time) bool {
	return (v.TrustFrom == nil || now.After(*v.TrustFrom)) && (v.TrustUntil == nil || !now.After(*v.TrustUntil))
}

// placeDetailView is what place detail shows after canonical_url.
type placeDetailView struct {
	Hours          *hoursView             `json:"hours"`
	Description    *string                `json:"description"`
	EnrichmentTier string                 `json:"enrichment_tier"`
	FieldTrust     map[string]*FieldTrust `json:"field_trust"`
}

// hoursView is Hours with every day present: a closed day is [], never null.
type hoursView struct {
	Mon []TimeRange `json:"mon"`
	Tue []TimeRange `json:"tue"`
	Wed []TimeRange `json:"wed"`
	Thu []TimeRange `json:"thu"`
	Fri []TimeRange `json:"fri"`
	Sat []TimeRange `json:"sat"`
	Sun []TimeRange `json:"sun"`
}

// reviewSummaryView is the review payload; generated_at is always a time.
type reviewSummaryView struct {
	PlaceID     string    `json:"place_id"`
	Headline    string    `json:"headline"`
	Summary     string    `json:"summary"`
	Confidence  float64   `json:"confidence"`
	ReviewCount int       `json:"review_count"`
	GeneratedAt time.Time `json:"generated_at"`
}

// RenderPlace renders p as imported at importedAt (a review summary without its own
// generated_at shows that instant), with field_trust as of now.
func RenderPlace(p Place, importedAt, now time.Time) (PlaceView, error) {
	var v PlaceView
	row, err := json.Marshal(p.PlaceRow)
	if err != nil {
		return v, err
	}
	v.Row = append(row[:len(row)-1], `,"canonical_url":`...)

	d := placeDetailView{Description: p.Description, EnrichmentTier: p.EnrichmentTier, FieldTrust: PlaceFieldTrust(p, now)}
	if h := p.Hours; h != nil {
		d.Hours = &hoursView{Mon: openDays(h.Mon), Tue: openDays(h.Tue), Wed: openDays(h.Wed),
			Thu: openDays(h.Thu), Fri: openDays(h.Fri), Sat: openDays(h.Sat), Sun: openDays(h.Sun)}
	}
	detail, err := json.Marshal(d)
	if err != nil {
		return v, err
	}
	detail[0] = ',' // the object continues the row's
	v.Detail = detail
	v.TrustFrom, v.TrustUntil = trustWindow(p.Sources, now)

	if len(p.Menu) > 0 {
		if v.Menu, err = json.Marshal(p.Menu); err != nil {
			return v, err
		}
		v.MenuItems = len(p.Menu)
	}
	if rs := p.ReviewSummary; rs != nil {
		r := reviewSummaryView{PlaceID: p.PlaceID, Headline: rs.Headline, Summary: rs.Summary,
			Confidence: rs.Confidence, ReviewCount: rs.ReviewCount, GeneratedAt: importedAt.UTC()}
		if rs.GeneratedAt != nil {
			r.GeneratedAt = rs.GeneratedAt.UTC()
		}
		if v.Reviews, err = json.Marshal(r); err != nil {
			return v, err
		}
	}
	return v, nil
}

func openDays(r []TimeRange) []TimeRange {
	if r == nil {
		return []TimeRange{}
	}
	return r
}

// trustWindow is the span of instants around now over which every field's trust tier stays
// what it is at now. A tier changes only when a field's newest observation turns older than
// TrustFreshFor or TrustStaleAt, so the window runs from the last such turn before now to
// the first one at or after it. Bounds are rounded inward to the microsecond, the precision
// a database keeps, so a stored window never claims an instant it does not hold.
func trustWindow(sources map[string][]Observation, now time.Time) (from, until *time.Time) {
	for _, obs := range sources {
		if len(obs) == 0 {
			continue
		}
		newest := obs[0].ObservedAt
		for _, o := range obs[1:] {
			if o.ObservedAt.After(newest) {
				newest = o.ObservedAt
			}
		}
		for _, age := range []time.Duration{TrustFreshFor, TrustStaleAt} {
			turn := newest.Add(age) // the tier holds up to and including this instant
			if turn.Before(now) {
				if from == nil || turn.After(*from) {
					f := turn
					from = &f
				}
			} else if until == nil || turn.Before(*until) {
				u := turn
				until = &u
			}
		}
	}
	if from != nil {
		f := from.Truncate(time.Microsecond)
		if f.Before(*from) {
			f = f.Add(time.Microsecond)
		}
		from = &f
	}
	if until != nil {
		u := until.Truncate(time.Microsecond)
		until = &u
	}
	return from, until
}
