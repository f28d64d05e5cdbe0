package projections

import (
	"fmt"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/projections/placeindex"
)

// PlaceDoc is what the place index keeps of a place. Full text covers the name, the category
// and the description, as the place list's q is defined (docs/api.md); never the SEO
// description, which a place's list row shows but q does not search.
func PlaceDoc(p domain.Place) placeindex.Doc {
	d := placeindex.Doc{PlaceID: p.PlaceID, Name: p.Name, Category: p.Category}
	if p.Description != nil {
		d.Description = *p.Description
	}
	if p.TownSlug != nil {
		d.TownSlug = *p.TownSlug
	}
	if p.Latitude != nil && p.Longitude != nil {
		d.Location = &placeindex.GeoPoint{Lat: *p.Latitude, Lng: *p.Longitude}
	}
	if p.RatingCount != nil {
		d.RatingCount = *p.RatingCount
	}
	return d
}

// indexedFields are the fields of a place the index keeps (PlaceDoc), named as in
// domain.Place: decoding only these skips the menu, review summary and sources that make up
// most of a PlaceImported payload.
type indexedFields struct {
	PlaceID     string   `json:"place_id"`
	Name        string   `json:"name"`
	Category    string   `json:"category"`
	TownSlug    *string  `json:"town_slug"`
	Latitude    *float64 `json:"latitude"`
	Longitude   *float64 `json:"longitude"`
	RatingCount *int     `json:"rating_count"`
	Description *string  `json:"description"`
}

// PlaceDocsFromEvents turns the PlaceImported events among events into index documents, one
// per place in order of first appearance, with the values of its newest event (the last
// one, unless a later stream version came earlier in the slice).
func PlaceDocsFromEvents(events []eventstore.Event) (docs []placeindex.Doc, err error) {
	at := map[string]int{}
	version := map[string]int64{}
	for _, e := range events {
		if e.Type != domain.EventPlaceImported {
			continue
		}
		f, err := decodeIndexedFields(e.Payload)
		if err != nil {
			return nil, fmt.Errorf("place docs: event %d: %w", e.Position, err)
		}
		d := PlaceDoc(domain.Place{PlaceRow: domain.PlaceRow{PlaceID: f.PlaceID, Name: f.Name, Category: f.Category,
			TownSlug: f.TownSlug, Latitude: f.Latitude, Longitude: f.Longitude, RatingCount: f.RatingCount},
			Description: f.Description})
		d.Version = e.Version
		if i, ok := at[d.PlaceID]; ok {
			if e.Version >= version[d.PlaceID] {
				docs[i], version[d.PlaceID] = d, e.Version
			}
			continue
		}
		at[d.PlaceID], version[d.PlaceID] = len(docs), e.Version
		docs = append(docs, d)
	}
	return docs, nil
}
