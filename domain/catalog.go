package domain

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Catalog event types. Each record lives in its own stream (see TownStream, PlaceStream,
// CalendarEventStream); the payload is the record itself as JSON.
const (
	EventTownImported          = "TownImported"
	EventPlaceImported         = "PlaceImported"
	EventCalendarEventImported = "CalendarEventImported"
)

// CatalogEventTypes are the types of the catalog's events (town, place and calendar-event
// streams).
var CatalogEventTypes = []string{EventTownImported, EventPlaceImported, EventCalendarEventImported}

// TownStream, PlaceStream and CalendarEventStream name the stream of one catalog record.
func TownStream(slug string) string        { return "town-" + slug }
func PlaceStream(placeID string) string    { return "place-" + placeID }
func CalendarEventStream(id string) string { return "event-" + id }

// Limits of one import batch: one POST /admin/catalog/import body, or one file of kyapi
// import (whose files are one transaction, with no limit on their number).
const (
	MaxImportRecords = 200_000
	MaxImportLine    = 1 << 20 // bytes, without the line break
	maxIDLength      = 128
	// maxNameLength bounds a town's or place's name and an event's title, in characters: a
	// place's normalized name is indexed, and a btree entry holds at most 2,704 bytes (a longer
	// name, accepted, stopped the catalog projection for good).
	maxNameLength = 300
)

// Enrichment tiers of a place.
const (
	TierBasic    = "basic"
	TierEnhanced = "enhanced"
	TierPremium  = "premium"
)

// Town is a Kentucky town; Slug is its canonical id.
type Town struct {
	Slug       string  `json:"slug"`
	Name       string  `json:"name"`
	County     *string `json:"county"`
	Population *int    `json:"population"`
}

// CalendarEvent is an upcoming happening in a town (the API's "event").
type CalendarEvent struct {
	EventID      string     `json:"event_id"`
	Title        string     `json:"title"`
	EventType    string     `json:"event_type"`
	StartDate    time.Time  `json:"start_date"`
	EndDate      *time.Time `json:"end_date"`
	TownSlug     *string    `json:"town_slug"`
	VenuePlaceID *string    `json:"venue_place_id"`
}

// TimeRange is one opening interval in local time, "HH:MM". Close may be "24:00", and an
// interval that closes before it opens runs past midnight.
type TimeRange struct {
	Open  string `json:"open"`
	Close string `json:"close"`
}

// Hours is a week of opening hours; a day without intervals is closed.
type Hours struct {
	Mon []TimeRange `json:"mon"`
	Tue []TimeRange `json:"tue"`
	Wed []TimeRange `json:"wed"`
	Thu []TimeRange `json:"thu"`
	Fri []TimeRange `json:"fri"`
	Sat []TimeRange `json:"sat"`
	Sun []TimeRange `json:"sun"`
}

// MenuItem is one dish or product of a place's menu.
type MenuItem struct {
	Name        string   `json:"name"`
	Description *string  `json:"description"`
	Price       *float64 `json:"price"`
	Currency    string   `json:"currency"`
	Section     *string  `json:"section"`
}

// ReviewSummary is the generated digest of a place's reviews.
type ReviewSummary struct {
	PlaceID     string     `json:"place_id"`
	Headline    string     `json:"headline"`
	Summary     string     `json:"summary"`
	Confidence  float64    `json:"confidence"`
	ReviewCount int        `json:"review_count"`
	GeneratedAt *time.Time `json:"generated_at"`
}

// Observation is what one source said about one field of a place, and when.
type Observation struct {
	Source string `json:"source"`
	// Value is the observed value as the import gave it (compacted JSON text; nil when the
	// import gave none, written as null). It stays text so that numbers keep every digit: read
	// as float64, two 20-digit values that differ compared equal.
	Value      json.RawMessage `json:"value"`
	ObservedAt time.Time       `json:"observed_at"`
}

// PlaceRow is a place as list and search rows show it, canonical_url apart: every Place
// field of the spec, nullable ones as explicit null, without the detail-only fields.
type PlaceRow struct {
	PlaceID        string   `json:"place_id"`
	Name           string   `json:"name"`
	Category       string   `json:"category"`
	Address        string   `json:"address,omitempty"`
	TownSlug       *string  `json:"town_slug"`
	Latitude       *float64 `json:"latitude"`
	Longitude      *float64 `json:"longitude"`
	IsGem          bool     `json:"is_gem"`
	LocalGemScore  *float64 `json:"local_gem_score"`
	Phone          *string  `json:"phone"`
	Website        *string  `json:"website"`
	Rating         *float64 `json:"rating"`
	RatingCount    *int     `json:"rating_count"`
	SEODescription *string  `json:"seo_description"`
}

// Place is a business as imported: its list row's fields (PlaceRow, first in its JSON), the
// detail-only fields, menu, review summary, the chain flag and the source observations behind
// field_trust.
type Place struct {
	PlaceRow
	Hours          *Hours                   `json:"hours"`
	Description    *string                  `json:"description"`
	EnrichmentTier string                   `json:"enrichment_tier"`
	Menu           []MenuItem               `json:"menu"`
	ReviewSummary  *ReviewSummary           `json:"review_summary"`
	IsChain        bool                     `json:"is_chain"`
	Sources        map[string][]Observation `json:"sources"`
}

// Catalog is one validated import batch. A record whose id occurs more than once in the
// batch appears once, with the values of its last occurrence.
type Catalog struct {
	Towns  []Town
	Places []Place
	Events []CalendarEvent
}

// Records is the number of distinct records in the batch.
func (c Catalog) Records() int { return len(c.Towns) + len(c.Places) + len(c.Events) }

// ImportError is the first problem found in an import batch. Line counts from 1 and
// includes blank lines; Field is a path such as "menu[2].price", or "" for the line.
type ImportError struct {
	Line    int
	Field   string
	Message string
}

func (e *ImportError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Message)
	}
	return fmt.Sprintf("line %d: field %q: %s", e.Line, e.Field, e.Message)
}

// ParseCatalog reads an NDJSON catalog (docs/api.md, "Catalog import") and validates all of
// it. Each non-blank line is an object whose "record" is "town", "event" or "place"; the
// record's fields are either on the line itself or in an object under the record kind
// ({"record":"town","town":{...}}). Unknown fields are ignored so that newer exporters
// keep working; a known field of the wrong type is an error. It returns the first
// problem as *ImportError.
func ParseCatalog(r io.Reader) (Catalog, error) {
	sc := bufio.NewScanner(r)
	// The scanner holds a line with its break, CRLF from a Windows tool, and the first line also
	// the byte order mark skipped before it (docs/limits.md, "Catalog import"): the 1 MiB
	// counts neither. A longer line that still fits is refused below, by its length.
	sc.Buffer(make([]byte, 0, 64*1024), len(utf8BOM)+MaxImportLine+len("\r\n"))
	var (
		c       Catalog
		towns   = map[string]int{}
		places  = map[string]int{}
		events  = map[string]int{}
		line    int
		records int
	)
	for sc.Scan() {
		if sc.Err() != nil {
			break // a read error (e.g. the body limit) ends the batch; reported below
		}
		line++
		raw := sc.Bytes()
		if line == 1 {
			// A UTF-8 byte order mark, which Windows tools write, may start the input (RFC
			// 8259 §8.1 lets a parser ignore it); it is not part of the first line.
			raw = bytes.TrimPrefix(raw, utf8BOM)
		}
		text := bytes.TrimSpace(raw)
		if len(text) == 0 {
			continue
		}
		if bytes.HasPrefix(text, utf8BOM) {
			return Catalog{}, &ImportError{Line: line, Message: "line starts with a byte order mark (U+FEFF), allowed only at the start of the input"}
		}
		// PostgreSQL text and jsonb cannot hold NUL; refuse it here, naming the line, and the
		// field when the line decodes.
		if bytes.HasPrefix(text, []byte{0x1f, 0x8b}) {
			// Read as text, a gzip stream failed as "a NUL on line 1".
			return Catalog{}, &ImportError{Line: line, Message: "gzip-compressed data: import it uncompressed (zcat FILE | kyapi import -)"}
		}
		if at := nulAt(text); at >= 0 {
			return Catalog{}, &ImportError{Line: line, Field: catalogFieldAt(text, at), Message: "NUL characters (\\u0000) are not allowed"}
		}
		if at, problem := jsonTextProblem(text); at >= 0 {
			field := catalogFieldAt(text, at)
			if field == "" {
				return Catalog{}, &ImportError{Line: line, Message: CheckJSONText(text).Error()}
			}
			return Catalog{}, &ImportError{Line: line, Field: field, Message: problem}
		}
		if len(raw) > MaxImportLine {
			return Catalog{}, &ImportError{Line: line, Message: "line is longer than 1 MiB"}
		}
		records++
		if records > MaxImportRecords {
			return Catalog{}, &ImportError{Line: line, Message: fmt.Sprintf("more than %d records: an import request, or one file of kyapi import, holds at most %[1]d; split it", MaxImportRecords)}
		}
		kind, obj, ferr := catalogSplitLine(text)
		if ferr == nil {
			switch kind {
			case "town":
				var t Town
				if t, ferr = catalogParseTown(obj); ferr == nil {
					catalogPut(&c.Towns, towns, t.Slug, t)
				}
			case "event":
				var e CalendarEvent
				if e, ferr = catalogParseEvent(obj); ferr == nil {
					catalogPut(&c.Events, events, e.EventID, e)
				}
			case "place":
				var p Place
				if p, ferr = catalogParsePlace(obj); ferr == nil {
					catalogPut(&c.Places, places, p.PlaceID, p)
				}
			}
		}
		if ferr != nil {
			return Catalog{}, &ImportError{Line: line, Field: ferr.field, Message: ferr.msg}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Catalog{}, &ImportError{Line: line + 1, Message: "line is longer than 1 MiB"}
		}
		return Catalog{}, fmt.Errorf("catalog: read: %w", err)
	}
	return c, nil
}

// utf8BOM is U+FEFF in UTF-8, the byte order mark.
var utf8BOM = []byte("\xEF\xBB\xBF")

// HasNUL reports whether the JSON text b holds a NUL character: the byte itself, or a
// \u0000 escape in a string. An escaped backslash followed by "u0000" (`\\u0000` in the
// text) is a backslash and five characters, not a NUL.
func HasNUL(b []byte) bool { return nulAt(b) >= 0 }

// NULField reports whether the JSON text b holds a NUL character (HasNUL) and the field that
// holds the first one, as the import names fields ("" when it is in no field's value).
func NULField(b []byte) (field string, found bool) {
	at := nulAt(b)
	if at < 0 {
		return "", false
	}
	return jsonFieldAt(b, at), true
}

// nulAt is where HasNUL finds the first NUL in b, or -1.
func nulAt(b []byte) int {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return i
	}
	for at, r := range jsonUEscapes(b) {
		if r == 0 {
			return at
		}
	}
	return -1
}

// catalogFieldAt names the field holding the byte at offset of a line, as the line's other
// errors name fields: on a line whose record is nested ({"record":"place","place":{...}})
// without the wrapper, and "" (the line) for a field beside the nested record, which is not
// read.
func catalogFieldAt(line []byte, offset int) string {
	field := jsonFieldAt(line, offset)
	var top map[string]json.RawMessage
	if json.Unmarshal(line, &top) != nil {
		return field
	}
	var kind string
	if json.Unmarshal(top["record"], &kind) != nil || len(bytes.TrimSpace(top[kind])) == 0 || catalogIsNull(top[kind]) {
		return field // a flat line: its fields are the record's
	}
	if rest, ok := strings.CutPrefix(field, kind+"."); ok {
		return rest
	}
	if field == "record" {
		return field
	}
	return ""
}

// catalogPut keeps the first position of an id and the last value: a repeated id in one
// batch is an update of the earlier line.
func catalogPut[T any](list *[]T, seen map[string]int, id string, v T) {
	if i, ok := seen[id]; ok {
		(*list)[i] = v
		return
	}
	seen[id] = len(*list)
	*list = append(*list, v)
}

// catalogFieldError is a problem with one field, before the line number is known.
type catalogFieldError struct{ field, msg string }

func catalogErr(field, format string, args ...any) *catalogFieldError {
	return &catalogFieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

func catalogSplitLine(text []byte) (string, catalogObject, *catalogFieldError) {
	top, ferr := catalogDecodeObject(text, "")
	if ferr != nil {
		return "", top, ferr
	}
	kind, ferr := top.str("record")
	if ferr != nil {
		return "", top, ferr
	}
	if kind == nil {
		return "", top, catalogErr("record", "is required")
	}
	switch *kind {
	case "town", "event", "place":
	default:
		return "", top, catalogErr("record", "unknown record kind %q; want town, event or place", *kind)
	}
	if raw, ok := top.fields[*kind]; ok && !catalogIsNull(raw) {
		// Fields in the nested object are reported without the wrapper, as on a flat line
		// (a field given twice in it too); the wrapper itself, not an object, by its name.
		nested, ferr := catalogDecodeObject(raw, *kind)
		if ferr != nil {
			ferr.field = strings.TrimPrefix(ferr.field, *kind+".")
			return "", top, ferr
		}
		nested.path = ""
		// Beside the nested object a field would not be read: refused, not dropped (of the
		// fields given, in name order, the first).
		var beside []string
		for k := range top.fields {
			if k != "record" && k != *kind {
				beside = append(beside, k)
			}
		}
		if len(beside) > 0 {
			slices.Sort(beside)
			return "", top, catalogErr(beside[0], "given beside the nested %q object: a nested line holds only \"record\" and the record; put it inside", *kind)
		}
		return *kind, nested, nil
	}
	return *kind, top, nil
}

func catalogParseTown(o catalogObject) (Town, *catalogFieldError) {
	var t Town
	var ferr *catalogFieldError
	if t.Slug, ferr = o.requiredString("slug"); ferr != nil {
		return t, ferr
	}
	if ferr = catalogCheckSlug(o.name("slug"), t.Slug); ferr != nil {
		return t, ferr
	}
	if t.Name, ferr = o.requiredString("name"); ferr != nil {
		return t, ferr
	}
	if ferr = catalogCheckName(o.name("name"), t.Name); ferr != nil {
		return t, ferr
	}
	if t.County, ferr = o.optionalString("county"); ferr != nil {
		return t, ferr
	}
	if t.Population, ferr = o.count("population"); ferr != nil {
		return t, ferr
	}
	return t, nil
}

func catalogParseEvent(o catalogObject) (CalendarEvent, *catalogFieldError) {
	var e CalendarEvent
	var ferr *catalogFieldError
	if e.EventID, ferr = o.requiredString("event_id"); ferr != nil {
		return e, ferr
	}
	if ferr = catalogCheckID(o.name("event_id"), e.EventID); ferr != nil {
		return e, ferr
	}
	if e.Title, ferr = o.requiredString("title"); ferr != nil {
		return e, ferr
	}
	if ferr = catalogCheckName(o.name("title"), e.Title); ferr != nil {
		return e, ferr
	}
	var typ *string
	if typ, ferr = o.optionalString("event_type"); ferr != nil {
		return e, ferr
	}
	e.EventType = "other"
	if typ != nil {
		e.EventType = *typ
	}
	var start *time.Time
	if start, ferr = o.timestamp("start_date"); ferr != nil {
		return e, ferr
	}
	if start == nil {
		return e, catalogErr(o.name("start_date"), "is required")
	}
	// The events list is sorted by start_date as PostgreSQL keeps it, to the microsecond, and
	// serves the start the import gave: finer, an event that starts later could be listed
	// first. Digits past the sixth are cut (docs/limits.md, "Catalog import"), as exports of
	// .NET's round-trip format (seven digits) write them, rather than refuse such catalogs.
	e.StartDate = start.Truncate(time.Microsecond)
	if e.EndDate, ferr = o.timestamp("end_date"); ferr != nil {
		return e, ferr
	}
	if e.EndDate != nil && e.EndDate.Before(*start) { // the start as given, not as cut
		return e, catalogErr(o.name("end_date"), "must not be before start_date")
	}
	if e.TownSlug, ferr = o.optionalString("town_slug"); ferr != nil {
		return e, ferr
	}
	if e.TownSlug != nil {
		if ferr = catalogCheckSlug(o.name("town_slug"), *e.TownSlug); ferr != nil {
			return e, ferr
		}
	}
	if e.VenuePlaceID, ferr = o.optionalString("venue_place_id"); ferr != nil {
		return e, ferr
	}
	if e.VenuePlaceID != nil {
		if ferr = catalogCheckID(o.name("venue_place_id"), *e.VenuePlaceID); ferr != nil {
			return e, ferr
		}
	}
	return e, nil
}

func catalogParsePlace(o catalogObject) (Place, *catalogFieldError) {
	p := Place{EnrichmentTier: TierBasic, Sources: map[string][]Observation{}}
	var ferr *catalogFieldError
	if p.PlaceID, ferr = o.requiredString("place_id"); ferr != nil {
		return p, ferr
	}
	if ferr = catalogCheckID(o.name("place_id"), p.PlaceID); ferr != nil {
		return p, ferr
	}
	if p.Name, ferr = o.requiredString("name"); ferr != nil {
		return p, ferr
	}
	if ferr = catalogCheckName(o.name("name"), p.Name); ferr != nil {
		return p, ferr
	}
	if p.Category, ferr = o.requiredString("category"); ferr != nil {
		return p, ferr
	}
	var s *string
	if s, ferr = o.optionalString("address"); ferr != nil {
		return p, ferr
	}
	if s != nil {
		p.Address = *s
	}
	if p.TownSlug, ferr = o.optionalString("town_slug"); ferr != nil {
		return p, ferr
	}
	if p.TownSlug != nil {
		if ferr = catalogCheckSlug(o.name("town_slug"), *p.TownSlug); ferr != nil {
			return p, ferr
		}
	}
	if p.Latitude, ferr = o.numberIn("latitude", -90, 90); ferr != nil {
		return p, ferr
	}
	if p.Longitude, ferr = o.numberIn("longitude", -180, 180); ferr != nil {
		return p, ferr
	}
	if p.Latitude != nil && p.Longitude == nil {
		return p, catalogErr(o.name("longitude"), "is required when latitude is given")
	}
	if p.Latitude == nil && p.Longitude != nil {
		return p, catalogErr(o.name("latitude"), "is required when longitude is given")
	}
	if p.IsGem, ferr = o.boolean("is_gem"); ferr != nil {
		return p, ferr
	}
	if p.LocalGemScore, ferr = o.numberIn("local_gem_score", 0, 1); ferr != nil {
		return p, ferr
	}
	if p.Phone, ferr = o.optionalString("phone"); ferr != nil {
		return p, ferr
	}
	if p.Website, ferr = o.optionalString("website"); ferr != nil {
		return p, ferr
	}
	if p.Website != nil {
		// Served as a URI: what is not written as one is written so (WebURI), not refused, so
		// that an export that imported before imports still.
		uri, err := WebURI(*p.Website)
		if err != nil {
			return p, catalogErr(o.name("website"), "%s", err.Error())
		}
		p.Website = &uri
	}
	if p.Rating, ferr = o.numberIn("rating", 0, 5); ferr != nil {
		return p, ferr
	}
	if p.RatingCount, ferr = o.count("rating_count"); ferr != nil {
		return p, ferr
	}
	if p.SEODescription, ferr = o.optionalString("seo_description"); ferr != nil {
		return p, ferr
	}
	if p.Hours, ferr = catalogParseHours(o); ferr != nil {
		return p, ferr
	}
	if p.Description, ferr = o.optionalString("description"); ferr != nil {
		return p, ferr
	}
	if s, ferr = o.optionalString("enrichment_tier"); ferr != nil {
		return p, ferr
	}
	if s != nil {
		switch *s {
		case TierBasic, TierEnhanced, TierPremium:
			p.EnrichmentTier = *s
		default:
			return p, catalogErr(o.name("enrichment_tier"), "must be basic, enhanced or premium")
		}
	}
	if p.Menu, ferr = catalogParseMenu(o); ferr != nil {
		return p, ferr
	}
	if p.ReviewSummary, ferr = catalogParseReview(o, p.PlaceID); ferr != nil {
		return p, ferr
	}
	if p.IsChain, ferr = o.boolean("is_chain"); ferr != nil {
		return p, ferr
	}
	if p.Sources, ferr = catalogParseSources(o); ferr != nil {
		return p, ferr
	}
	return p, nil
}

// catalogClock is a time of day that opens or closes a range; only a close may be 24:00 (the
// end of the day).
var catalogClock = map[string]*regexp.Regexp{
	"open":  regexp.MustCompile(`^(?:[01][0-9]|2[0-3]):[0-5][0-9]$`),
	"close": regexp.MustCompile(`^(?:[01][0-9]|2[0-3]):[0-5][0-9]$|^24:00$`),
}

func catalogParseHours(o catalogObject) (*Hours, *catalogFieldError) {
	days, ferr := o.object("hours")
	if days == nil || ferr != nil {
		return nil, ferr
	}
	h := &Hours{}
	slots := map[string]*[]TimeRange{
		"mon": &h.Mon, "tue": &h.Tue, "wed": &h.Wed, "thu": &h.Thu, "fri": &h.Fri, "sat": &h.Sat, "sun": &h.Sun,
	}
	for _, day := range slices.Sorted(maps.Keys(days.fields)) {
		if _, ok := slots[day]; !ok {
			return nil, catalogErr(days.name(day), "unknown day; want mon, tue, wed, thu, fri, sat or sun")
		}
	}
	for _, day := range []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"} {
		ranges, ferr := days.array(day)
		if ferr != nil {
			return nil, ferr
		}
		out := make([]TimeRange, 0, len(ranges))
		for i, raw := range ranges {
			iv, ferr := catalogDecodeObject(raw, fmt.Sprintf("%s[%d]", days.name(day), i))
			if ferr != nil {
				return nil, ferr
			}
			var r TimeRange
			for _, f := range []struct {
				name string
				dst  *string
			}{{"open", &r.Open}, {"close", &r.Close}} {
				v, ferr := iv.requiredString(f.name)
				if ferr != nil {
					return nil, ferr
				}
				if !catalogClock[f.name].MatchString(v) {
					if f.name == "open" && v == "24:00" {
						return nil, catalogErr(iv.name(f.name), "must be a time of day from 00:00 to 23:59 (24:00 only closes a range)")
					}
					return nil, catalogErr(iv.name(f.name), "must be a time of day HH:MM")
				}
				*f.dst = v
			}
			out = append(out, r)
		}
		*slots[day] = out
	}
	return h, nil
}

func catalogParseMenu(o catalogObject) ([]MenuItem, *catalogFieldError) {
	items, ferr := o.array("menu")
	if ferr != nil || items == nil {
		return nil, ferr
	}
	menu := make([]MenuItem, 0, len(items))
	for i, raw := range items {
		it, ferr := catalogDecodeObject(raw, fmt.Sprintf("%s[%d]", o.name("menu"), i))
		if ferr != nil {
			return nil, ferr
		}
		m := MenuItem{Currency: "USD"}
		if m.Name, ferr = it.requiredString("name"); ferr != nil {
			return nil, ferr
		}
		if m.Description, ferr = it.optionalString("description"); ferr != nil {
			return nil, ferr
		}
		if m.Price, ferr = it.numberIn("price", 0, math.MaxFloat64); ferr != nil {
			return nil, ferr
		}
		var cur *string
		if cur, ferr = it.optionalString("currency"); ferr != nil {
			return nil, ferr
		}
		if cur != nil {
			// Prices are in US dollars only (docs/api.md, "Catalog import"); another
			// currency would be served as if it were dollars.
			if *cur != "USD" {
				return nil, catalogErr(it.name("currency"), `must be "USD"`)
			}
		}
		if m.Section, ferr = it.optionalString("section"); ferr != nil {
			return nil, ferr
		}
		menu = append(menu, m)
	}
	return menu, nil
}

func catalogParseReview(o catalogObject, placeID string) (*ReviewSummary, *catalogFieldError) {
	rv, ferr := o.object("review_summary")
	if rv == nil || ferr != nil {
		return nil, ferr
	}
	r := &ReviewSummary{PlaceID: placeID}
	var s *string
	if s, ferr = rv.optionalString("headline"); ferr != nil {
		return nil, ferr
	}
	if s != nil {
		r.Headline = *s
	}
	if r.Summary, ferr = rv.requiredString("summary"); ferr != nil {
		return nil, ferr
	}
	var conf *float64
	if conf, ferr = rv.numberIn("confidence", 0, 1); ferr != nil {
		return nil, ferr
	}
	if conf != nil {
		r.Confidence = *conf
	}
	var n *int
	if n, ferr = rv.count("review_count"); ferr != nil {
		return nil, ferr
	}
	if n != nil {
		r.ReviewCount = *n
	}
	if r.GeneratedAt, ferr = rv.timestamp("generated_at"); ferr != nil {
		return nil, ferr
	}
	return r, nil
}

func catalogParseSources(o catalogObject) (map[string][]Observation, *catalogFieldError) {
	out := map[string][]Observation{}
	fields, ferr := o.object("sources")
	if fields == nil || ferr != nil {
		return out, ferr
	}
	for _, field := range slices.Sorted(maps.Keys(fields.fields)) {
		list, ferr := fields.array(field)
		if ferr != nil {
			return nil, ferr
		}
		if list == nil {
			continue
		}
		obs := make([]Observation, 0, len(list))
		for i, raw := range list {
			ob, ferr := catalogDecodeObject(raw, fmt.Sprintf("%s[%d]", fields.name(field), i))
			if ferr != nil {
				return nil, ferr
			}
			var x Observation
			if x.Source, ferr = ob.requiredString("source"); ferr != nil {
				return nil, ferr
			}
			var at *time.Time
			if at, ferr = ob.timestamp("observed_at"); ferr != nil {
				return nil, ferr
			}
			if at == nil {
				return nil, catalogErr(ob.name("observed_at"), "is required")
			}
			x.ObservedAt = *at
			if raw, ok := ob.fields["value"]; ok {
				var compact bytes.Buffer
				if err := json.Compact(&compact, raw); err != nil {
					return nil, catalogErr(ob.name("value"), "is not valid JSON")
				}
				if name, twice := catalogRepeatedNameWithin(raw); twice {
					return nil, catalogErr(ob.name("value"), "names the field %q twice in one object", name)
				}
				if n, ok := hugeExponent(raw); ok {
					return nil, catalogErr(ob.name("value"), "holds the number %.40s, whose exponent has more than 18 digits", n)
				}
				x.Value = compact.Bytes()
			}
			obs = append(obs, x)
		}
		out[field] = obs
	}
	return out, nil
}

// hugeExponent finds a number in the valid JSON value raw whose exponent has more than 18
// digits: observed numbers are compared by their exact value (normalizeObservedValue), which
// such an exponent would cost without bound to work out.
func hugeExponent(raw []byte) (json.Number, bool) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err != nil {
			return "", false
		}
		if n, ok := tok.(json.Number); ok {
			if i := strings.IndexAny(string(n), "eE"); i >= 0 && len(strings.TrimLeft(string(n)[i+1:], "+-0")) > 18 {
				return n, true
			}
		}
	}
}

var catalogIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

func catalogCheckID(field, id string) *catalogFieldError {
	if len(id) > maxIDLength || !catalogIDPattern.MatchString(id) {
		return catalogErr(field, "must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'", maxIDLength)
	}
	if strings.Trim(id, ".") == "" {
		// "." and ".." are path segments every URL parser removes: /places/.. is not the
		// place's address, and its canonical_url would not be either.
		return catalogErr(field, "must not be only dots (%q is a path segment URLs drop)", id)
	}
	return nil
}

func catalogCheckName(field, name string) *catalogFieldError {
	if utf8.RuneCountInString(name) > maxNameLength {
		return catalogErr(field, "must be at most %d characters", maxNameLength)
	}
	return nil
}

func catalogCheckSlug(field, slug string) *catalogFieldError {
	if len(slug) > maxIDLength || !IsSlug(slug) {
		return catalogErr(field, "must be 1 to %d characters of a-z, 0-9 or '-'", maxIDLength)
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// catalogObject is one JSON object of a line, with the path under which its fields are
// reported.
type catalogObject struct {
	fields map[string]json.RawMessage
	path   string
}

func catalogDecodeObject(raw []byte, path string) (catalogObject, *catalogFieldError) {
	o := catalogObject{path: path}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		if path == "" {
			return o, catalogErr("", "line is not a JSON object")
		}
		return o, catalogErr(path, "must be an object")
	}
	if err := json.Unmarshal(raw, &o.fields); err != nil {
		if path == "" {
			return o, catalogErr("", "invalid JSON: %v", err)
		}
		return o, catalogErr(path, "invalid JSON: %v", err)
	}
	if name, ok := catalogRepeatedField(raw, o.fields); ok {
		return o, catalogErr(o.name(name), "appears more than once in the object")
	}
	return o, nil
}

// catalogRepeatedField finds a field the valid JSON object raw names twice: decoding into a
// map keeps the last and silently drops the first. fields is what raw decoded to; only when it
// holds fewer names than raw has is the object read again, name by name.
func catalogRepeatedField(raw []byte, fields map[string]json.RawMessage) (string, bool) {
	if catalogCountNames(raw) == len(fields) {
		return "", false
	}
	return catalogRepeatedName(raw, false)
}

// catalogRepeatedNameWithin finds a name that an object anywhere in the valid JSON value raw
// gives twice (a value kept as it is, such as an observation's: decoding keeps the last).
func catalogRepeatedNameWithin(raw []byte) (string, bool) { return catalogRepeatedName(raw, true) }

// catalogRepeatedName finds a name given twice in one object of the valid JSON value raw: in
// any of its objects when deep, else in raw's own (nested objects are checked where they are
// decoded, under their own path).
func catalogRepeatedName(raw []byte, deep bool) (string, bool) {
	type frame struct {
		names map[string]struct{} // nil in an array
		name  bool                // an object's next token is a name
	}
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if top != nil && top.names != nil {
					top.name = true // after this value, the next name
				}
				f := &frame{}
				if t == '{' {
					f.names, f.name = map[string]struct{}{}, true
				}
				stack = append(stack, f)
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.names != nil && top.name {
				if _, seen := top.names[t]; seen && (deep || len(stack) == 1) {
					return t, true
				}
				top.names[t], top.name = struct{}{}, false
				continue
			}
			if top != nil && top.names != nil {
				top.name = true
			}
		default:
			if top != nil && top.names != nil {
				top.name = true
			}
		}
	}
}

// catalogCountNames counts the names of the valid JSON object raw (its own, not its values').
func catalogCountNames(raw []byte) int {
	n, depth, inString, name := 0, 0, false, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			if depth == 1 && name {
				n, name = n+1, false
			}
		case '{', '[':
			depth++
			name = depth == 1 && c == '{'
		case '}', ']':
			depth--
		case ',':
			name = depth == 1
		}
	}
	return n
}

func (o catalogObject) name(field string) string {
	if o.path == "" {
		return field
	}
	return o.path + "." + field
}

func catalogIsNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// raw returns the field's JSON, or nil when it is absent or null.
func (o catalogObject) raw(field string) json.RawMessage {
	v, ok := o.fields[field]
	if !ok || catalogIsNull(v) {
		return nil
	}
	return v
}

func (o catalogObject) str(field string) (*string, *catalogFieldError) {
	raw := o.raw(field)
	if raw == nil {
		return nil, nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return nil, catalogErr(o.name(field), "must be a string")
	}
	return &s, nil
}

// optionalString is str with blank strings read as absent.
func (o catalogObject) optionalString(field string) (*string, *catalogFieldError) {
	s, ferr := o.str(field)
	if s == nil || ferr != nil || strings.TrimSpace(*s) == "" {
		return nil, ferr
	}
	return s, nil
}

func (o catalogObject) requiredString(field string) (string, *catalogFieldError) {
	s, ferr := o.optionalString(field)
	if ferr != nil {
		return "", ferr
	}
	if s == nil {
		return "", catalogErr(o.name(field), "is required")
	}
	return *s, nil
}

func (o catalogObject) number(field string) (*float64, *catalogFieldError) {
	raw := o.raw(field)
	if raw == nil {
		return nil, nil
	}
	var f float64
	if c := raw[0]; (c != '-' && (c < '0' || c > '9')) || json.Unmarshal(raw, &f) != nil {
		return nil, catalogErr(o.name(field), "must be a number")
	}
	return &f, nil
}

func (o catalogObject) numberIn(field string, lo, hi float64) (*float64, *catalogFieldError) {
	f, ferr := o.number(field)
	if f == nil || ferr != nil {
		return nil, ferr
	}
	if *f < lo || *f > hi {
		if hi == math.MaxFloat64 {
			return nil, catalogErr(o.name(field), "must not be negative")
		}
		return nil, catalogErr(o.name(field), "must be between %s and %s", catalogFormat(lo), catalogFormat(hi))
	}
	return f, nil
}

func catalogFormat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// integer accepts whole numbers, including forms like 12.0 or 1e3 that some exporters write.
func (o catalogObject) integer(field string) (*int, *catalogFieldError) {
	f, ferr := o.number(field)
	if f == nil || ferr != nil {
		if ferr != nil {
			ferr.msg = "must be an integer"
		}
		return nil, ferr
	}
	if *f != math.Trunc(*f) || math.Abs(*f) > 1<<53 {
		return nil, catalogErr(o.name(field), "must be an integer")
	}
	n := int(*f)
	return &n, nil
}

// maxCount bounds the counts a record holds (population, rating_count, review_count): the
// catalog's tables keep them as 32-bit integers (an accepted 2^31, which they cannot hold,
// stopped the catalog projection for good).
const maxCount = math.MaxInt32

// count is a whole number from 0 to maxCount.
func (o catalogObject) count(field string) (*int, *catalogFieldError) {
	n, ferr := o.integer(field)
	switch {
	case n == nil || ferr != nil:
		return nil, ferr
	case *n < 0:
		return nil, catalogErr(o.name(field), "must not be negative")
	case *n > maxCount:
		return nil, catalogErr(o.name(field), "must be at most %d", maxCount)
	}
	return n, nil
}

func (o catalogObject) boolean(field string) (bool, *catalogFieldError) {
	raw := o.raw(field)
	if raw == nil {
		return false, nil
	}
	var b bool
	if json.Unmarshal(raw, &b) != nil {
		return false, catalogErr(o.name(field), "must be true or false")
	}
	return b, nil
}

func (o catalogObject) timestamp(field string) (*time.Time, *catalogFieldError) {
	s, ferr := o.optionalString(field)
	if s == nil || ferr != nil {
		if ferr != nil {
			ferr.msg = "must be an RFC 3339 date-time string"
		}
		return nil, ferr
	}
	// The read API serves it in UTC, as JSON: 9999-12-31T23:00:00-05:00 is in the year 10000
	// there, which no JSON time can say (accepted, it stopped the catalog projection for good);
	// an offset of +24:00 cannot be stored as JSON at all (accepted, the import answered 500).
	t, err := ParseInstant(*s)
	switch {
	case errors.Is(err, ErrInstantYear):
		return nil, catalogErr(o.name(field), "must fall in a year from 0000 to 9999 in UTC")
	case errors.Is(err, ErrInstantOffset):
		return nil, catalogErr(o.name(field), "must be an RFC 3339 date-time with an offset from -23:59 to +23:59")
	case err != nil:
		return nil, catalogErr(o.name(field), "must be an RFC 3339 date-time such as 2026-05-01T18:00:00Z")
	}
	return &t, nil
}

func (o catalogObject) array(field string) ([]json.RawMessage, *catalogFieldError) {
	raw := o.raw(field)
	if raw == nil {
		return nil, nil
	}
	var a []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &a) != nil {
		return nil, catalogErr(o.name(field), "must be an array")
	}
	if a == nil {
		a = []json.RawMessage{}
	}
	return a, nil
}

func (o catalogObject) object(field string) (*catalogObject, *catalogFieldError) {
	raw := o.raw(field)
	if raw == nil {
		return nil, nil
	}
	sub, ferr := catalogDecodeObject(raw, o.name(field))
	if ferr != nil {
		return nil, ferr
	}
	return &sub, nil
}

var catalogStoreNumber = regexp.MustCompile(`\s*(?:#\s*\d+|\bno\.?\s*\d+)\s*$`)

// NormalizedName is the form of a place name used to spot chains: lowercase, without a
// trailing store number ("#12", "No. 3"), without punctuation and symbols, single-spaced.
// "Joe's Diner #12" and "JOES DINER" are the same name. A name with no letter or digit
// normalizes to "", which names no chain (the catalog projection and the audit skip it).
func NormalizedName(name string) string {
	s := strings.ToLower(strings.TrimSpace(name))
	if loc := catalogStoreNumber.FindStringIndex(s); loc != nil && loc[0] > 0 {
		s = s[:loc[0]]
	}
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(r)
		case unicode.IsSpace(r):
			space = true
		default:
			// Punctuation and symbols vanish: "Bar-B-Q" is "barbq", "Joe's" is "joes".
		}
	}
	return b.String()
}

// ChainThreshold is how many places must share a normalized name for all of them to count
// as a chain, whether or not the import marks them is_chain.
const ChainThreshold = 3

// CanonicalURL is the public address of a place: {base}/places/{id}.
func CanonicalURL(base, placeID string) string {
	return strings.TrimRight(base, "/") + "/places/" + url.PathEscape(placeID)
}
