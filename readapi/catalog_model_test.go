package readapi_test

// The catalog read endpoints against a brute-force model of docs/api.md and decisions.md:
// random catalogs (fixed seeds) are imported through the real command and projections, the
// read API is asked page by page, and every answer (rows, order, distances, meta, headers) and
// every ledger entry is compared with what a plain Go reading of the documented rules computes
// from the records imported.

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
)

// ---------------------------------------------------------------------------------------------
// The model's records: what an import line says, nil where it says nothing.

type modelTown struct {
	Slug, Name string
	County     *string
	Population *int
}

type modelMenuItem struct {
	Name                 string
	Description, Section *string
	Price                *float64
}

type modelReview struct {
	Headline, Summary string
	Confidence        float64
	ReviewCount       int
	GeneratedAt       *time.Time
}

type modelPlace struct {
	ID, Name, Category string
	Address            string // "" = not given
	Town               *string
	Lat, Lng           *float64
	IsGem              bool
	GemScore           *float64
	Phone, Website     *string
	Rating             *float64
	RatingCount        *int
	SEO, Description   *string
	Tier               string // "" = not given
	Hours              map[string][][2]string
	Menu               []modelMenuItem // nil = not given
	Review             *modelReview
	IsChain            bool
	ImportedAt         time.Time
}

type modelEvent struct {
	ID, Title   string
	Type        *string
	Start       time.Time // as given, offset included
	StartText   string
	End         *time.Time
	EndText     string
	Town, Venue *string
}

func (p modelPlace) record() map[string]any {
	r := map[string]any{"record": "place", "place_id": p.ID, "name": p.Name, "category": p.Category}
	if p.Address != "" {
		r["address"] = p.Address
	}
	put := func(k string, v any, given bool) {
		if given {
			r[k] = v
		}
	}
	put("town_slug", deref(p.Town), p.Town != nil)
	put("latitude", deref(p.Lat), p.Lat != nil)
	put("longitude", deref(p.Lng), p.Lng != nil)
	put("is_gem", p.IsGem, p.IsGem)
	put("local_gem_score", deref(p.GemScore), p.GemScore != nil)
	put("phone", deref(p.Phone), p.Phone != nil)
	put("website", deref(p.Website), p.Website != nil)
	put("rating", deref(p.Rating), p.Rating != nil)
	put("rating_count", deref(p.RatingCount), p.RatingCount != nil)
	put("seo_description", deref(p.SEO), p.SEO != nil)
	put("description", deref(p.Description), p.Description != nil)
	put("enrichment_tier", p.Tier, p.Tier != "")
	put("is_chain", true, p.IsChain)
	if p.Hours != nil {
		h := map[string]any{}
		for day, ranges := range p.Hours {
			var list []any
			for _, rg := range ranges {
				list = append(list, map[string]any{"open": rg[0], "close": rg[1]})
			}
			h[day] = list
		}
		r["hours"] = h
	}
	if p.Menu != nil {
		items := []any{}
		for _, it := range p.Menu {
			m := map[string]any{"name": it.Name}
			if it.Description != nil {
				m["description"] = *it.Description
			}
			if it.Price != nil {
				m["price"] = *it.Price
			}
			if it.Section != nil {
				m["section"] = *it.Section
			}
			items = append(items, m)
		}
		r["menu"] = items
	}
	if rv := p.Review; rv != nil {
		m := map[string]any{"headline": rv.Headline, "summary": rv.Summary, "confidence": rv.Confidence, "review_count": rv.ReviewCount}
		if rv.GeneratedAt != nil {
			m["generated_at"] = rv.GeneratedAt.Format(time.RFC3339)
		}
		r["review_summary"] = m
	}
	return r
}

func (e modelEvent) record() map[string]any {
	r := map[string]any{"record": "event", "event_id": e.ID, "title": e.Title, "start_date": e.StartText}
	if e.Type != nil {
		r["event_type"] = *e.Type
	}
	if e.End != nil {
		r["end_date"] = e.EndText
	}
	if e.Town != nil {
		r["town_slug"] = *e.Town
	}
	if e.Venue != nil {
		r["venue_place_id"] = *e.Venue
	}
	return r
}

func (t modelTown) record() map[string]any {
	r := map[string]any{"record": "town", "slug": t.Slug, "name": t.Name}
	if t.County != nil {
		r["county"] = *t.County
	}
	if t.Population != nil {
		r["population"] = *t.Population
	}
	return r
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func ptr[T any](v T) *T { return &v }

// ---------------------------------------------------------------------------------------------
// The random catalog.

// modelTownSlugs are the slugs places and events are in: aliases' slugs, slugs that are
// prefixes of others, doubled and leading dashes.
var modelTownSlugs = []string{
	"lexington-fayette-urban-county", "louisville-jefferson-county-metro-government-balance",
	"bowling-green", "bowling-green-north", "berea", "bere", "paducah", "mount-vernon",
	"mount--vernon", "-dash-first", "a1",
}

// modelWordsPool are the words names, categories' neighbours and descriptions are made of:
// diacritics, case, ligatures, a word longer than the index's 20-letter n-grams, symbols.
var modelWordsPool = []string{
	"Café", "CAFE", "cafe", "Bourbon", "BOURBON", "bourbons", "Ñandú", "Straße", "strasse", "Œuvre",
	"naïve", "Naive", "ﬁsh", "Fish", "Diner", "Grill", "Books", "Bar-B-Q", "24/7", "Kentucky",
	"Supercalifragilisticexpialidocious", "Hot", "Brown", "Fried", "Chicken", "Ça", "Noël", "Smokehouse",
}

var modelChainNames = []string{"Joe's Diner", "JOES DINER #12", "Joes Diner No. 3", "Bluegrass Pizza", "Bluegrass Pizza #7", "🍕", "☕"}

var modelCategories = []string{
	"food.restaurant.bbq", "food.restaurant", "food.cafe", "food", "foodtruck.mobile", "shop.books",
	"bar.bourbon", ".misc", "café.bar",
}

var modelIDPrefixes = []string{"p-", "P-", "p.", "p_", "p:", "Gem-", "gem-", "gem.", "gem_", "z", "A", "0"}

// Kentucky's bounding box.
const (
	kyLatMin, kyLatMax = 36.4967, 39.1475
	kyLngMin, kyLngMax = -89.5715, -81.9645
)

type modelCatalog struct {
	towns  map[string]modelTown
	places map[string]modelPlace
	events map[string]modelEvent
}

type modelGen struct {
	r   *rand.Rand
	seq int
}

func (g *modelGen) pick(list []string) string { return list[g.r.IntN(len(list))] }
func (g *modelGen) chance(p float64) bool     { return g.r.Float64() < p }

func (g *modelGen) words(min, max int) string {
	n := min + g.r.IntN(max-min+1)
	w := make([]string, n)
	for i := range w {
		w[i] = g.pick(modelWordsPool)
	}
	return strings.Join(w, " ")
}

func (g *modelGen) town() *string {
	if g.chance(0.1) {
		return nil
	}
	return ptr(g.pick(modelTownSlugs))
}

func (g *modelGen) location(c *modelCatalog) (lat, lng *float64) {
	switch {
	case g.chance(0.1):
		return nil, nil
	case g.chance(0.15) && len(c.places) > 0:
		// The very coordinates of another place.
		for _, id := range sortedKeys(c.places) {
			if p := c.places[id]; p.Lat != nil && g.chance(0.3) {
				return ptr(*p.Lat), ptr(*p.Lng)
			}
		}
	case g.chance(0.12):
		// On an edge of Kentucky's box.
		la := kyLatMin + g.r.Float64()*(kyLatMax-kyLatMin)
		ln := kyLngMin + g.r.Float64()*(kyLngMax-kyLngMin)
		switch g.r.IntN(4) {
		case 0:
			la = kyLatMin
		case 1:
			la = kyLatMax
		case 2:
			ln = kyLngMin
		default:
			ln = kyLngMax
		}
		return ptr(la), ptr(ln)
	}
	return ptr(37.5 + (g.r.Float64()-0.5)*0.3), ptr(-85.3 + (g.r.Float64()-0.5)*0.3)
}

func (g *modelGen) place(c *modelCatalog, id string, at time.Time) modelPlace {
	p := modelPlace{ID: id, ImportedAt: at}
	switch {
	case g.chance(0.15):
		p.Name = g.pick(modelChainNames)
	case g.chance(0.15) && len(c.places) > 0:
		// The same text as another place: equal relevance, ordered by place_id.
		other := c.places[sortedKeys(c.places)[g.r.IntN(len(c.places))]]
		p.Name, p.Category, p.Description = other.Name, other.Category, other.Description
	default:
		p.Name = g.words(1, 3)
	}
	if p.Category == "" {
		p.Category = g.pick(modelCategories)
		if g.chance(0.6) {
			p.Description = ptr(g.words(0, 4))
		}
	}
	if g.chance(0.6) {
		p.Address = fmt.Sprintf("%d Main St", 1+g.r.IntN(900))
	}
	p.Town = g.town()
	p.Lat, p.Lng = g.location(c)
	p.IsGem = g.chance(0.3)
	if g.chance(0.6) {
		p.GemScore = ptr([]float64{0, 0.5, 0.69999, 0.7, 0.85, 0.85, 1}[g.r.IntN(7)])
	}
	if g.chance(0.5) {
		p.Phone = ptr(fmt.Sprintf("+1 502-555-%04d", g.r.IntN(10000)))
	}
	if g.chance(0.4) {
		p.Website = ptr(fmt.Sprintf("https://example.com/w/%d", g.r.IntN(1000)))
	}
	if g.chance(0.8) {
		p.Rating = ptr(float64(g.r.IntN(11)) / 2)
	}
	if g.chance(0.85) {
		p.RatingCount = ptr(g.r.IntN(5))
	}
	if g.chance(0.3) {
		p.SEO = ptr("seoonly " + g.words(0, 2))
	}
	if g.chance(0.5) {
		p.Tier = []string{"basic", "enhanced", "premium"}[g.r.IntN(3)]
	}
	switch {
	case g.chance(0.2):
		p.Hours = map[string][][2]string{"mon": {{"09:00", "17:00"}}, "sat": {{"22:00", "02:00"}, {"10:00", "12:00"}}}
	case g.chance(0.1):
		p.Hours = map[string][][2]string{} // given, every day closed
	case g.chance(0.1):
		p.Hours = map[string][][2]string{"tue": {}, "sun": {{"00:00", "24:00"}}}
	}
	switch {
	case g.chance(0.15):
		p.Menu = []modelMenuItem{}
	case g.chance(0.35):
		p.Menu = []modelMenuItem{{Name: "Brisket", Price: ptr(12.5), Section: ptr("Mains")}, {Name: "Tea", Description: ptr(" "), Price: ptr(0.0)},
			{Name: "Burgoo", Description: ptr("Kentucky stew"), Section: ptr("")}}
	}
	if g.chance(0.4) {
		p.Review = &modelReview{Headline: []string{"Good " + g.words(1, 1), ""}[g.r.IntN(2)], Summary: "Guests like it.", Confidence: 0.5, ReviewCount: g.r.IntN(50)}
		if g.chance(0.5) {
			p.Review.GeneratedAt = ptr(time.Date(2025, 5, 1+g.r.IntN(20), 8, 0, 0, 0, time.UTC))
		}
	}
	p.IsChain = g.chance(0.05)
	return p
}

// eventStart is a start around the test clock's day: midnights, the last microsecond of a
// day, offsets that move the UTC day, digits past the microsecond.
func (g *modelGen) eventStart() (time.Time, string) {
	day := start.Truncate(24*time.Hour).AddDate(0, 0, -3+g.r.IntN(99))
	var at time.Time
	switch g.r.IntN(7) {
	case 0:
		at = day
	case 1:
		at = day.Add(24*time.Hour - time.Microsecond)
	case 2:
		at = day.Add(2 * time.Hour).In(time.FixedZone("", -5*3600)) // 21:00-05:00 the day before is 02:00Z on the day
	case 3:
		at = day.Add(-90 * time.Minute).In(time.FixedZone("", 2*3600)) // 00:30+02:00 is the day before in UTC
	case 4:
		at = day.Add(12*time.Hour + 123456789) // nanoseconds: cut to the microsecond
	case 5:
		at = time.Date(2025, 9, 13, 23, 59, 59, 999999000, time.UTC) // the default window's last instant
	default:
		at = day.Add(time.Duration(g.r.IntN(24)) * time.Hour)
	}
	return at, at.Format(time.RFC3339Nano)
}

func (g *modelGen) event(id string) modelEvent {
	e := modelEvent{ID: id, Title: g.words(1, 3)}
	if g.chance(0.7) {
		e.Type = ptr([]string{"music", "festival", "market", "arts", ""}[g.r.IntN(5)])
	}
	e.Start, e.StartText = g.eventStart()
	if g.chance(0.5) {
		end := e.Start.Add([]time.Duration{0, 2 * time.Hour, 30 * time.Hour}[g.r.IntN(3)])
		e.End, e.EndText = &end, end.Format(time.RFC3339Nano)
	}
	e.Town = g.town()
	if g.chance(0.4) {
		e.Venue = ptr(fmt.Sprintf("venue-%d", g.r.IntN(5)))
	}
	return e
}

func (g *modelGen) newID(prefixes []string) string {
	g.seq++
	return fmt.Sprintf("%s%d", g.pick(prefixes), g.seq)
}

// generate is a first catalog: every town record (some slugs have none), places and events.
func (g *modelGen) generate(places, events int) (*modelCatalog, []map[string]any) {
	c := &modelCatalog{towns: map[string]modelTown{}, places: map[string]modelPlace{}, events: map[string]modelEvent{}}
	var lines []map[string]any
	for i, slug := range modelTownSlugs {
		if g.chance(0.2) {
			continue
		}
		t := modelTown{Slug: slug, Name: g.words(1, 2)}
		if i%2 == 0 {
			t.County, t.Population = ptr("County "+strconv.Itoa(i)), ptr(1000*i)
		}
		c.towns[slug] = t
		lines = append(lines, t.record())
	}
	for _, id := range []string{"Gem-B", "gem-a", "gem-c", "gem.d", "gem_c", "GEM-A"} {
		p := g.place(c, id, start)
		c.places[p.ID] = p
		lines = append(lines, p.record())
	}
	for range places {
		p := g.place(c, g.newID(modelIDPrefixes), start)
		c.places[p.ID] = p
		lines = append(lines, p.record())
	}
	for range events {
		e := g.event(g.newID([]string{"ev-", "EV-", "ev."}))
		c.events[e.ID] = e
		lines = append(lines, e.record())
	}
	return c, lines
}

// reimport changes some records (places move towns and places, are renamed into and out of
// chain names, events move days), adds a few, and imports some unchanged.
func (g *modelGen) reimport(c *modelCatalog, at time.Time) []map[string]any {
	var lines []map[string]any
	for _, id := range sortedKeys(c.places) {
		p := c.places[id]
		switch {
		case g.chance(0.15):
			p.Town = g.town()
		case g.chance(0.1):
			p.Lat, p.Lng = g.location(c)
		case g.chance(0.1):
			p.Name = g.pick(modelChainNames)
		case g.chance(0.1):
			p = g.place(c, id, at)
		case g.chance(0.05):
			p.RatingCount = ptr(g.r.IntN(5))
		default:
			continue
		}
		p.ImportedAt = at
		c.places[id] = p
		lines = append(lines, p.record())
	}
	for _, slug := range sortedKeys(c.towns) {
		if g.chance(0.3) {
			t := modelTown{Slug: slug, Name: g.words(1, 2)}
			if g.chance(0.5) {
				t.County, t.Population = ptr("Renamed County"), ptr(g.r.IntN(100000))
			}
			c.towns[slug] = t
			lines = append(lines, t.record())
		}
	}
	for range 8 {
		p := g.place(c, g.newID(modelIDPrefixes), at)
		c.places[p.ID] = p
		lines = append(lines, p.record())
	}
	for _, id := range sortedKeys(c.events) {
		if g.chance(0.25) {
			e := g.event(id)
			c.events[id] = e
			lines = append(lines, e.record())
		}
	}
	for range 4 {
		e := g.event(g.newID([]string{"ev-", "EV-"}))
		c.events[e.ID] = e
		lines = append(lines, e.record())
	}
	g.r.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	return lines
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // byte order
	return keys
}

// ---------------------------------------------------------------------------------------------
// The rules of docs/api.md, written plainly.

// modelFold folds the letters the generator uses to ASCII, as ASCII folding does.
var modelFold = map[rune]string{
	'é': "e", 'É': "E", 'ë': "e", 'ï': "i", 'Ï': "I", 'ñ': "n", 'Ñ': "N", 'ú': "u", 'ß': "ss", 'Œ': "OE",
	'œ': "oe", 'ﬁ': "fi", 'Ç': "C", 'ç': "c",
}

// modelSplit is the runs of letters and digits of s.
func modelSplit(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsNumber(r) })
}

// modelFoldWord folds and lower-cases one word; it may fall apart into several.
func modelFoldWord(w string) []string {
	var b strings.Builder
	for _, r := range w {
		if f, ok := modelFold[r]; ok {
			b.WriteString(f)
		} else if r > unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsNumber(r)) {
			panic(fmt.Sprintf("the model does not fold %q", r))
		} else {
			b.WriteRune(r)
		}
	}
	return modelSplit(strings.ToLower(b.String()))
}

// modelTextWords are the words of a text as places are searched by them.
func modelTextWords(s string) []string {
	var out []string
	for _, w := range modelSplit(s) {
		out = append(out, modelFoldWord(w)...)
	}
	return out
}

// modelQuery is q as the place list reads it: its distinct words, each the tokens it folds to.
func modelQuery(q string) [][]string {
	var out [][]string
	seen := map[string]bool{}
	for _, w := range modelSplit(q) {
		toks := modelFoldWord(w)
		key := strings.Join(toks, " ")
		if !seen[key] {
			seen[key] = true
			out = append(out, toks)
		}
	}
	return out
}

func hasPrefixWord(words []string, tok string) bool {
	return slices.ContainsFunc(words, func(w string) bool { return strings.HasPrefix(w, tok) })
}

func first20(tok string) string {
	if r := []rune(tok); len(r) > 20 {
		return string(r[:20])
	}
	return tok
}

// qMatch reports whether p matches the words of q, and how many of them its name holds.
func qMatch(p modelPlace, q [][]string) (ok bool, inName int) {
	text := modelTextWords(p.Name + " " + p.Category + " " + deref0(p.Description))
	name := modelTextWords(p.Name)
	for _, toks := range q {
		all := true
		for _, t := range toks {
			if !hasPrefixWord(text, t) {
				return false, 0
			}
			all = all && hasPrefixWord(name, first20(t))
		}
		if all {
			inName++
		}
	}
	return true, inName
}

// given is an optional string as the import reads it: a blank one is not given
// (docs/limits.md, "Catalog import").
func given(s *string) *string {
	if s == nil || strings.TrimSpace(*s) == "" {
		return nil
	}
	return s
}

func deref0(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

var modelAliases = map[string]string{
	"lexington": "lexington-fayette-urban-county", "louisville": "louisville-jefferson-county-metro-government-balance",
	"bowling green": "bowling-green",
}

// modelResolveTown is a town parameter as docs/api.md resolves it; unmatchable is true for a
// value that slugifies to nothing.
func modelResolveTown(v string) (prefix string, unmatchable bool) {
	key := strings.Join(strings.Fields(strings.ToLower(v)), " ")
	if key == "" {
		return "", false
	}
	if slug, ok := modelAliases[key]; ok {
		return slug, false
	}
	if regexp.MustCompile(`^[a-z0-9-]+$`).MatchString(key) {
		return key, false
	}
	var b strings.Builder
	dash := false
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
		case r == '\'':
		default:
			dash = true
		}
	}
	return b.String(), b.Len() == 0
}

func inTown(town *string, prefix string) bool {
	if prefix == "" {
		return true
	}
	return town != nil && strings.HasPrefix(*town, prefix)
}

func ratingCount0(p modelPlace) int {
	if p.RatingCount == nil {
		return 0
	}
	return *p.RatingCount
}

// popularity is the place list's order without q.
func popularity(a, b modelPlace) int {
	if ra, rb := ratingCount0(a), ratingCount0(b); ra != rb {
		return rb - ra
	}
	return strings.Compare(a.ID, b.ID)
}

// haversineKm is the great-circle distance with the mean Earth radius docs/api.md names.
func haversineKm(lat1, lng1, lat2, lng2 float64) float64 {
	const rad = math.Pi / 180
	p1, p2 := lat1*rad, lat2*rad
	dp, dl := p2-p1, (lng2-lng1)*rad
	h := math.Sin(dp/2)*math.Sin(dp/2) + math.Cos(p1)*math.Cos(p2)*math.Sin(dl/2)*math.Sin(dl/2)
	h = math.Min(1, math.Max(0, h))
	return 2 * 6371.0088 * math.Asin(math.Sqrt(h))
}

type modelHit struct {
	p modelPlace
	d float64
}

func byDistance(a, b modelHit) int {
	if a.d != b.d {
		if a.d < b.d {
			return -1
		}
		return 1
	}
	return strings.Compare(a.p.ID, b.p.ID)
}

func topLevel(category string) string { t, _, _ := strings.Cut(category, "."); return t }

var modelStoreNumber = regexp.MustCompile(`\s*(?:#\s*\d+|\bno\.?\s*\d+)\s*$`)

// modelNormalizedName is a name as chains are spotted by.
func modelNormalizedName(name string) string {
	s := strings.ToLower(strings.TrimSpace(name))
	if loc := modelStoreNumber.FindStringIndex(s); loc != nil && loc[0] > 0 {
		s = s[:loc[0]]
	}
	var words []string
	for _, f := range strings.Fields(s) {
		w := strings.Map(func(r rune) rune {
			if unicode.IsLetter(r) || unicode.IsDigit(r) {
				return r
			}
			return -1
		}, f)
		if w != "" {
			words = append(words, w)
		}
	}
	return strings.Join(words, " ")
}

func (c *modelCatalog) chains() map[string]bool {
	count := map[string]int{}
	for _, p := range c.places {
		count[modelNormalizedName(p.Name)]++
	}
	out := map[string]bool{}
	for id, p := range c.places {
		n := modelNormalizedName(p.Name)
		out[id] = p.IsChain || n != "" && count[n] >= 3
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// The account as the model meters it.

type modelEntry struct {
	op      string
	paid    []string
	dedup   []string
	omitted int
	credits int64
}

type modelAccount struct {
	id, key string
	balance int64
	day     string
	claims  map[string]bool
	ledger  []modelEntry
}

var modelCosts = map[string]int64{
	"places.list": 1, "search": 1, "places.detail": 1, "places.menu": 3, "places.reviews": 2,
	"places.related": 2, "trending": 5, "hidden-gems": 5, "towns": 10, "events": 5,
}

type modelCharge struct {
	status    int
	served    []bool
	credits   int64
	dedupRows int
	omitted   int
	perRow    bool
}

// charge meters a request of op for resources, as decisions.md says.
func (a *modelAccount) charge(now time.Time, op string, resources []string) modelCharge {
	if d := now.UTC().Format(time.DateOnly); d != a.day {
		a.day, a.claims = d, map[string]bool{}
	}
	cost := modelCosts[op]
	perRow := op == "places.list" || op == "search"
	c := modelCharge{status: 200, served: make([]bool, len(resources)), perRow: perRow}
	e := modelEntry{op: op}
	if !perRow {
		switch {
		case a.claims[resources[0]]:
			c.served[0] = true
			e.dedup = resources
		case a.balance < cost:
			return modelCharge{status: 402}
		default:
			c.served[0], c.credits = true, cost
			e.paid = resources
		}
	} else {
		seen := map[string]bool{}
		for i, r := range resources {
			switch {
			case a.claims[r] || seen[r]:
				c.served[i] = true
				e.dedup = append(e.dedup, r)
			case a.balance-c.credits >= cost:
				c.served[i] = true
				c.credits += cost
				seen[r] = true
				e.paid = append(e.paid, r)
			default:
				c.omitted++
			}
		}
		if len(resources) > 0 && c.omitted == len(resources) {
			return modelCharge{status: 402}
		}
		c.dedupRows = len(e.dedup)
		if len(resources) == 0 {
			return c // no charge event
		}
	}
	for _, r := range e.paid {
		a.claims[r] = true
	}
	a.balance -= c.credits
	e.omitted, e.credits = c.omitted, c.credits
	a.ledger = append(a.ledger, e)
	return c
}

// ---------------------------------------------------------------------------------------------
// The run: a stack, the model, and the comparisons.

type modelRun struct {
	t        *testing.T
	s        *projectedStack
	g        *modelGen
	c        *modelCatalog
	acct     *modelAccount
	usage    map[string]map[string]int // UTC day → place id → metered requests
	requests int
	probe    string
}

func (m *modelRun) fail(path, format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("GET %s: %s", path, fmt.Sprintf(format, args...))
}

// metered requests path and compares the status, the meta and X-Credits-Remaining with what
// the model charges for resources; it returns the answer and which resources were served.
func (m *modelRun) metered(path, op string, resources []string) (response, modelCharge) {
	m.t.Helper()
	m.requests++
	r := m.s.get(m.acct.key, path)
	want := m.acct.charge(m.s.clock.Now(), op, resources)
	if r.Status != want.status {
		m.fail(path, "status %d, want %d: %s", r.Status, want.status, r.Body)
	}
	if want.status == 402 && r.Header.Get("X-Credits-Remaining") != strconv.FormatInt(m.acct.balance, 10) {
		m.fail(path, "402 with X-Credits-Remaining %q, want the balance %d", r.Header.Get("X-Credits-Remaining"), m.acct.balance)
	}
	if want.status != 200 {
		return r, want
	}
	var env struct {
		Data json.RawMessage `json:"data"`
		Meta meta            `json:"meta"`
	}
	if err := json.Unmarshal(r.Body, &env); err != nil {
		m.fail(path, "%v", err)
	}
	var list []json.RawMessage
	if json.Unmarshal(env.Data, &list) == nil && (env.Meta.Count == nil || *env.Meta.Count != len(list)) {
		m.fail(path, "count %s for a list of %d", show(env.Meta.Count), len(list))
	}
	got := env.Meta
	served := 0
	for _, ok := range want.served {
		if ok {
			served++
		}
	}
	fullyDedup := want.credits == 0 && (want.perRow && want.dedupRows > 0 || !want.perRow)
	switch {
	case got.CreditsUsed != want.credits || got.CreditsRemaining != m.acct.balance:
		m.fail(path, "credits_used %d remaining %d, want %d and %d", got.CreditsUsed, got.CreditsRemaining, want.credits, m.acct.balance)
	case r.Header.Get("X-Credits-Remaining") != strconv.FormatInt(m.acct.balance, 10):
		m.fail(path, "X-Credits-Remaining %q, want %d", r.Header.Get("X-Credits-Remaining"), m.acct.balance)
	case got.Deduplicated == nil || *got.Deduplicated != fullyDedup:
		m.fail(path, "deduplicated %s, want %v", show(got.Deduplicated), fullyDedup)
	case want.perRow && (got.DeduplicatedCount == nil || *got.DeduplicatedCount != want.dedupRows):
		m.fail(path, "deduplicated_count %s, want %d", show(got.DeduplicatedCount), want.dedupRows)
	case !want.perRow && got.DeduplicatedCount != nil:
		m.fail(path, "deduplicated_count %d on a fixed-cost answer", *got.DeduplicatedCount)
	case want.omitted > 0 && (got.Partial == nil || !*got.Partial || got.OmittedUnpaid == nil || *got.OmittedUnpaid != want.omitted):
		m.fail(path, "partial %s omitted_unpaid %s, want true and %d", show(got.Partial), show(got.OmittedUnpaid), want.omitted)
	case want.omitted == 0 && (got.Partial != nil || got.OmittedUnpaid != nil):
		m.fail(path, "partial %s omitted_unpaid %s with nothing omitted", show(got.Partial), show(got.OmittedUnpaid))
	case want.perRow && (got.Count == nil || *got.Count != served):
		m.fail(path, "count %s, want %d", show(got.Count), served)
	}
	return r, want
}

// show is an optional meta field as a client reads it.
func show[T any](v *T) string {
	if v == nil {
		return "absent"
	}
	return fmt.Sprint(*v)
}

// countUsage counts a metered request of a place for trending.
func (m *modelRun) countUsage(id string) {
	day := m.s.clock.Now().UTC().Format(time.DateOnly)
	if m.usage[day] == nil {
		m.usage[day] = map[string]int{}
	}
	m.usage[day][id]++
}

// placeRow is what a list or search row shows of p (docs/api.md, "Places").
func (m *modelRun) placeRow(p modelPlace) map[string]any {
	row := map[string]any{
		"place_id": p.ID, "name": p.Name, "category": p.Category, "town_slug": deref(p.Town),
		"latitude": deref(p.Lat), "longitude": deref(p.Lng), "is_gem": p.IsGem, "local_gem_score": deref(p.GemScore),
		"phone": deref(p.Phone), "website": deref(p.Website), "rating": deref(p.Rating),
		"rating_count": jsonNumber(p.RatingCount), "seo_description": deref(p.SEO),
		"canonical_url": baseURL + "/places/" + p.ID,
	}
	if p.Address != "" {
		row["address"] = p.Address
	}
	return row
}

func jsonNumber(n *int) any {
	if n == nil {
		return nil
	}
	return float64(*n)
}

// sameJSON compares a decoded answer with the model's value by their JSON.
func sameJSON(got, want any) bool {
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	return string(a) == string(b)
}

func placeResources(ps []modelPlace) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = "place:" + p.ID
	}
	return out
}

// pageRows compares one page of a per-row list with want (the page the model computed) and
// what the charge served of it.
func (m *modelRun) pageRows(path, op string, want []modelPlace, dist []float64) {
	m.t.Helper()
	r, ch := m.metered(path, op, placeResources(want))
	if ch.status != 200 {
		return
	}
	rows, _ := r.rows(m.t)
	var exp []map[string]any
	for i, p := range want {
		if !ch.served[i] {
			continue
		}
		row := m.placeRow(p)
		if dist != nil {
			row["distance_km"] = dist[i]
		}
		exp = append(exp, row)
	}
	if len(rows) != len(exp) {
		m.fail(path, "%d rows %v, want %d %v", len(rows), ids(rows), len(exp), idsOf(exp, "place_id"))
	}
	for i := range rows {
		if !sameJSON(rows[i], exp[i]) {
			g, _ := json.Marshal(rows[i])
			w, _ := json.Marshal(exp[i])
			m.fail(path, "row %d:\n got %s\nwant %s", i, g, w)
		}
	}
}

// pages asks every page of a list of n rows with limit, the last partial one, one past the
// end, and one far past it; page(offset, limit) is the model's page.
func (m *modelRun) pages(base, op string, total int, page func(offset, limit int) ([]modelPlace, []float64)) {
	m.t.Helper()
	limits := []int{0, 1, 2, 3, 5, 7, 100}
	limit := limits[m.g.r.IntN(len(limits))]
	step := limit
	if limit == 0 {
		step = 20 // the default
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	for offset := 0; ; offset += step {
		path := base
		var params []string
		if limit != 0 {
			params = append(params, "limit="+strconv.Itoa(limit))
		}
		if offset != 0 || m.g.chance(0.2) {
			params = append(params, "offset="+strconv.Itoa(offset))
		}
		if len(params) > 0 {
			path += sep + strings.Join(params, "&")
		}
		want, dist := page(offset, step)
		m.pageRows(path, op, want, dist)
		if offset > total {
			break
		}
	}
	want, dist := page(10000, step)
	m.pageRows(base+sep+"offset=10000", op, want, dist)
}

func window[T any](all []T, offset, limit int) []T {
	if offset >= len(all) {
		return nil
	}
	return all[offset:min(len(all), offset+limit)]
}

var modelTownParams = []string{
	"", "lexington", "LEXINGTON", "  Lexington ", "louisville", "bowling green", "Bowling  Green",
	"bowling-green", "BOWLING-GREEN", "Bowling_Green", "bere", "berea", "mount", "mount--", "Mount Vernon",
	"-", "--", "-dash", "!!!", "pad", "zzz", "a", "lex", "Miller's",
}

var modelQParams = []string{
	"", "   ", "café", "CAFÉ", "cAfE", "caf", "bourb", "BOURBON", "cafe bourbon", "bourbon cafe", "café cafe",
	"Joe's", "joes diner", "food", "food.restaurant", "bbq", "restaurant", "seoonly", "!!!", "🍕", "🍕 cafe",
	"ﬁsh", "fish", "STRASSE", "straß", "naive", "NAÏVE", "œuvre", "oeuvre", "ñandu", "24/7", "7",
	"supercalifragilistic", "supercalifragilisticexp", "supercalifragilisticxyz", "noel", "ca", "c", "z",
	"main", "mobile", "bar", "kentucky smokehouse", "hot brown chicken",
}

// listPlaces checks the place list for one town and q.
func (m *modelRun) listPlaces(town, q string) {
	m.t.Helper()
	v := url.Values{}
	if town != "" {
		v.Set("town", town)
	}
	if q != "" {
		v.Set("q", q)
	}
	base := "/api/data/places"
	if enc := v.Encode(); enc != "" {
		base += "?" + enc
	}
	prefix, unmatchable := modelResolveTown(town)
	words := modelQuery(q)
	type match struct {
		p      modelPlace
		inName int
	}
	var matches []match
	for _, id := range sortedKeys(m.c.places) {
		p := m.c.places[id]
		if unmatchable || !inTown(p.Town, prefix) || strings.TrimSpace(q) != "" && len(words) == 0 {
			continue
		}
		ok, inName := qMatch(p, words)
		if ok {
			matches = append(matches, match{p, inName})
		}
	}
	if len(words) == 0 {
		all := make([]modelPlace, len(matches))
		for i, mt := range matches {
			all[i] = mt.p
		}
		slices.SortFunc(all, popularity)
		m.pages(base, "places.list", len(all), func(offset, limit int) ([]modelPlace, []float64) {
			return window(all, offset, limit), nil
		})
		return
	}
	// With q the text score is the index's; the model holds the served order to what the
	// documents fix: the matches, names holding more words of q first, places of the same text
	// by place_id, and every page a window of one order.
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	whole := base + sep + "limit=100"
	want := map[string]match{}
	for _, mt := range matches {
		want[mt.p.ID] = mt
	}
	// The whole list is one page (fewer than 100 places match): paid, so first find the order
	// from a look at the index through an account of its own, then ask the model's account.
	probe := m.s.get(m.probeKey(), whole)
	rows, _ := probe.rows(m.t)
	if len(rows) != len(matches) {
		m.fail(whole, "%d rows %v, want %d: %v", len(rows), ids(rows), len(matches), func() []string {
			var out []string
			for _, mt := range matches {
				out = append(out, mt.p.ID)
			}
			return out
		}())
	}
	order := make([]modelPlace, len(rows))
	for i, row := range rows {
		id, _ := row["place_id"].(string)
		mt, ok := want[id]
		if !ok {
			m.fail(whole, "row %d is %s, which does not match q=%q town=%q", i, id, q, town)
		}
		order[i] = mt.p
		if i > 0 {
			prev := want[order[i-1].ID]
			if prev.inName < mt.inName {
				m.fail(whole, "%s (name holds %d words of q) after %s (name holds %d)", id, mt.inName, prev.p.ID, prev.inName)
			}
		}
		for _, before := range order[:i] {
			if before.Name == mt.p.Name && before.Category == mt.p.Category && deref0(before.Description) == deref0(mt.p.Description) && before.ID > id {
				m.fail(whole, "%s after %s, the same text: ties go by place_id", id, before.ID)
			}
		}
	}
	m.pages(base, "places.list", len(order), func(offset, limit int) ([]modelPlace, []float64) {
		return window(order, offset, limit), nil
	})
}

// probeKey is a key of another account, rich enough for every probe.
func (m *modelRun) probeKey() string {
	if m.probe == "" {
		_, m.probe = m.s.customer(2_500_000)
	}
	return m.probe
}

// search checks geo search around center within radius ("" = the default).
func (m *modelRun) search(lat, lng float64, radius string) {
	m.t.Helper()
	r := 5.0
	base := "/api/data/search?lat=" + strconvG(lat) + "&lng=" + strconvG(lng)
	if radius != "" {
		var err error
		if r, err = strconv.ParseFloat(radius, 64); err != nil {
			m.t.Fatal(err)
		}
		base += "&radius=" + radius
	}
	var hits []modelHit
	for _, p := range m.c.places {
		if p.Lat == nil {
			continue
		}
		if d := haversineKm(lat, lng, *p.Lat, *p.Lng); d <= r {
			hits = append(hits, modelHit{p, d})
		}
	}
	slices.SortFunc(hits, byDistance)
	m.pages(base, "search", len(hits), func(offset, limit int) ([]modelPlace, []float64) {
		w := window(hits, offset, limit)
		ps, ds := make([]modelPlace, len(w)), make([]float64, len(w))
		for i, h := range w {
			ps[i], ds[i] = h.p, h.d
		}
		return ps, ds
	})
}

// detail checks a place's detail, menu, reviews and related places.
func (m *modelRun) detail(id string) {
	m.t.Helper()
	p, ok := m.c.places[id]
	path := "/api/data/places/" + url.PathEscape(id)
	if !ok {
		for _, sub := range []string{"", "/menu", "/reviews", "/related"} {
			m.requests++
			m.s.get(m.acct.key, path+sub).expectError(m.t, 404, "not_found")
		}
		return
	}
	r, ch := m.metered(path, "places.detail", []string{"place:" + id})
	if ch.status == 200 {
		m.countUsage(id)
		d, _ := r.object(m.t)
		want := m.placeRow(p)
		var hours any
		if p.Hours != nil {
			h := map[string]any{}
			for _, day := range []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"} {
				list := []any{}
				for _, rg := range p.Hours[day] {
					list = append(list, map[string]any{"open": rg[0], "close": rg[1]})
				}
				h[day] = list
			}
			hours = h
		}
		want["hours"], want["description"] = hours, deref(given(p.Description))
		want["enrichment_tier"] = cmpOr(p.Tier, "basic")
		trust, _ := d["field_trust"].(map[string]any)
		for _, f := range []string{"name", "category", "address", "town_slug", "latitude", "longitude", "is_gem",
			"local_gem_score", "phone", "website", "rating", "rating_count", "seo_description", "hours",
			"description", "enrichment_tier"} {
			if v, ok := trust[f]; !ok || v != nil {
				m.fail(path, "field_trust.%s %v (present %v), want null: no source observed it", f, v, ok)
			}
		}
		delete(d, "field_trust")
		if !sameJSON(d, want) {
			g, _ := json.Marshal(d)
			w, _ := json.Marshal(want)
			m.fail(path, "detail:\n got %s\nwant %s", g, w)
		}
	}

	if len(p.Menu) == 0 {
		m.requests++
		m.s.get(m.acct.key, path+"/menu").expectError(m.t, 404, "no_menu_data")
	} else if r, ch := m.metered(path+"/menu", "places.menu", []string{"menu:" + id}); ch.status == 200 {
		m.countUsage(id)
		items, _ := r.rows(m.t)
		var want []map[string]any
		for _, it := range p.Menu {
			want = append(want, map[string]any{"name": it.Name, "description": deref(given(it.Description)), "price": deref(it.Price),
				"currency": "USD", "section": deref(given(it.Section))})
		}
		if !sameJSON(items, want) {
			m.fail(path+"/menu", "menu %v, want %v", items, want)
		}
	}

	if p.Review == nil {
		m.requests++
		m.s.get(m.acct.key, path+"/reviews").expectError(m.t, 404, "no_review_data")
	} else if r, ch := m.metered(path+"/reviews", "places.reviews", []string{"reviews:" + id}); ch.status == 200 {
		m.countUsage(id)
		got, _ := r.object(m.t)
		gen := p.ImportedAt
		if p.Review.GeneratedAt != nil {
			gen = *p.Review.GeneratedAt
		}
		want := map[string]any{"place_id": id, "headline": p.Review.Headline, "summary": p.Review.Summary,
			"confidence": p.Review.Confidence, "review_count": p.Review.ReviewCount, "generated_at": gen.UTC().Format(time.RFC3339Nano)}
		if !sameJSON(got, want) {
			m.fail(path+"/reviews", "review %v, want %v", got, want)
		}
	}

	var hits []modelHit
	if p.Lat != nil {
		for _, o := range m.c.places {
			if o.ID != id && o.Lat != nil && topLevel(o.Category) == topLevel(p.Category) {
				hits = append(hits, modelHit{o, haversineKm(*p.Lat, *p.Lng, *o.Lat, *o.Lng)})
			}
		}
	}
	slices.SortFunc(hits, byDistance)
	hits = window(hits, 0, 10)
	if r, ch := m.metered(path+"/related", "places.related", []string{"related:" + id}); ch.status == 200 {
		m.countUsage(id)
		got, _ := r.rows(m.t)
		want := []map[string]any{}
		for _, h := range hits {
			want = append(want, map[string]any{"place_id": h.p.ID, "name": h.p.Name, "category": h.p.Category,
				"town_slug": deref(h.p.Town), "distance_km": h.d, "rating": deref(h.p.Rating),
				"reason": fmt.Sprintf("same category, %.1f km away", h.d)})
		}
		if !sameJSON(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			m.fail(path+"/related", "related:\n got %s\nwant %s", g, w)
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (m *modelRun) towns() {
	m.t.Helper()
	r, ch := m.metered("/api/data/towns", "towns", []string{"towns"})
	if ch.status != 200 {
		return
	}
	got, _ := r.rows(m.t)
	want := []map[string]any{}
	for _, slug := range sortedKeys(m.c.towns) {
		t := m.c.towns[slug]
		want = append(want, map[string]any{"slug": t.Slug, "name": t.Name, "county": deref(t.County), "population": jsonNumber(t.Population)})
	}
	if !sameJSON(got, want) {
		m.fail("/api/data/towns", "towns %v, want %v", got, want)
	}
}

// events checks the events list; from and to are "" when not sent.
func (m *modelRun) events(town, from, to string) {
	m.t.Helper()
	v := url.Values{}
	for k, val := range map[string]string{"town": town, "from": from, "to": to} {
		if val != "" {
			v.Set(k, val)
		}
	}
	path := "/api/data/events"
	if enc := v.Encode(); enc != "" {
		path += "?" + enc
	}
	today := m.s.clock.Now().UTC().Format(time.DateOnly)
	f, t := cmpOr(from, today), to
	fd, _ := time.Parse(time.DateOnly, f)
	if t == "" {
		t = fd.AddDate(0, 0, 90).Format(time.DateOnly)
	}
	td, _ := time.Parse(time.DateOnly, t)
	if fd.After(td) {
		m.requests++
		m.s.get(m.acct.key, path).expectError(m.t, 400, "bad_request")
		return
	}
	prefix, unmatchable := modelResolveTown(town)
	var evs []modelEvent
	for _, e := range m.c.events {
		at := e.Start.UTC().Truncate(time.Microsecond)
		if !unmatchable && inTown(e.Town, prefix) && !at.Before(fd) && at.Before(td.AddDate(0, 0, 1)) {
			evs = append(evs, e)
		}
	}
	slices.SortFunc(evs, func(a, b modelEvent) int {
		if c := a.Start.Truncate(time.Microsecond).Compare(b.Start.Truncate(time.Microsecond)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	townKey := prefix
	if unmatchable {
		townKey = "~"
	}
	r, ch := m.metered(path, "events", []string{fmt.Sprintf("events?town=%s&from=%s&to=%s", townKey, f, t)})
	if ch.status != 200 {
		return
	}
	got, _ := r.rows(m.t)
	want := []map[string]any{}
	for _, e := range evs {
		var end any
		if e.End != nil {
			end = e.End.UTC().Format(time.RFC3339Nano)
		}
		want = append(want, map[string]any{"event_id": e.ID, "title": e.Title, "event_type": cmpOr(deref0(given(e.Type)), "other"),
			"start_date": e.Start.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano), "end_date": end,
			"town_slug": deref(e.Town), "venue_place_id": deref(e.Venue)})
	}
	if !sameJSON(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		m.fail(path, "events:\n got %s\nwant %s", g, w)
	}
}

// hiddenGems checks hidden gems for a town and limit ("" = not sent).
func (m *modelRun) hiddenGems(town, limit string) {
	m.t.Helper()
	v := url.Values{}
	if town != "" {
		v.Set("town", town)
	}
	if limit != "" {
		v.Set("limit", limit)
	}
	path := "/api/data/hidden-gems"
	if enc := v.Encode(); enc != "" {
		path += "?" + enc
	}
	n := 10
	if limit != "" {
		n, _ = strconv.Atoi(limit)
	}
	prefix, unmatchable := modelResolveTown(town)
	chains := m.c.chains()
	var gems []modelPlace
	for _, p := range m.c.places {
		gem := p.IsGem || p.GemScore != nil && *p.GemScore >= 0.7
		if gem && !chains[p.ID] && !unmatchable && inTown(p.Town, prefix) {
			gems = append(gems, p)
		}
	}
	slices.SortFunc(gems, func(a, b modelPlace) int {
		if c := descNullsLast(a.GemScore, b.GemScore); c != 0 {
			return c
		}
		if c := descNullsLast(a.RatingCount, b.RatingCount); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	gems = window(gems, 0, n)
	townKey := prefix
	if unmatchable {
		townKey = "~"
	}
	r, ch := m.metered(path, "hidden-gems", []string{fmt.Sprintf("hidden-gems?town=%s&limit=%d", townKey, n)})
	if ch.status != 200 {
		return
	}
	got, _ := r.rows(m.t)
	want := []map[string]any{}
	for _, p := range gems {
		want = append(want, map[string]any{"place_id": p.ID, "name": p.Name, "category": p.Category, "town_slug": deref(p.Town),
			"local_gem_score": deref(p.GemScore), "rating": deref(p.Rating), "rating_count": jsonNumber(p.RatingCount)})
	}
	if !sameJSON(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		m.fail(path, "hidden gems:\n got %s\nwant %s", g, w)
	}
}

func descNullsLast[T int | float64](a, b *T) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	case *a > *b:
		return -1
	case *a < *b:
		return 1
	}
	return 0
}

// trending checks trending against the usage the model counted.
func (m *modelRun) trending() {
	m.t.Helper()
	m.s.catchUp() // the usage read model, as a serving process's wait for it would
	now := m.s.clock.Now().UTC()
	requests := map[string]int{}
	for d := range 7 {
		for id, n := range m.usage[now.AddDate(0, 0, -d).Format(time.DateOnly)] {
			requests[id] += n
		}
	}
	var used, rest []modelPlace
	for _, id := range sortedKeys(m.c.places) {
		if requests[id] > 0 {
			used = append(used, m.c.places[id])
		} else {
			rest = append(rest, m.c.places[id])
		}
	}
	slices.SortFunc(used, func(a, b modelPlace) int {
		if ra, rb := requests[a.ID], requests[b.ID]; ra != rb {
			return rb - ra
		}
		if c := descNullsLast(a.RatingCount, b.RatingCount); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	slices.SortFunc(rest, popularity)
	items := window(append(used, rest...), 0, 20)
	r, ch := m.metered("/api/data/trending", "trending", []string{"trending"})
	if ch.status != 200 {
		return
	}
	got, _ := r.rows(m.t)
	want := []map[string]any{}
	for _, p := range items {
		want = append(want, map[string]any{"place_id": p.ID, "name": p.Name, "category": p.Category, "town_slug": deref(p.Town),
			"score": requests[p.ID], "requests_7d": requests[p.ID]})
	}
	if !sameJSON(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		m.fail("/api/data/trending", "trending:\n got %s\nwant %s", g, w)
	}
}

// ledger compares the account's charge entries with the model's.
func (m *modelRun) ledger() {
	m.t.Helper()
	views := commands.Views{Pool: m.s.pool}
	var got []modelEntry
	for after := int64(0); ; {
		page, err := views.Ledger(ctx, m.acct.id, after, 1000)
		if err != nil {
			m.t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			after = e.Position
			if e.Type != domain.EventRequestCharged && e.Type != domain.EventRequestDeduplicated {
				continue
			}
			var p struct {
				Operation string   `json:"operation"`
				Paid      []string `json:"paid"`
				Dedup     []string `json:"deduplicated"`
				Omitted   int      `json:"omitted_unpaid"`
			}
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				m.t.Fatal(err)
			}
			got = append(got, modelEntry{op: p.Operation, paid: p.Paid, dedup: p.Dedup, omitted: p.Omitted, credits: -e.CreditsDelta})
		}
	}
	if len(got) != len(m.acct.ledger) {
		m.t.Fatalf("ledger has %d charge entries, the model %d", len(got), len(m.acct.ledger))
	}
	for i, want := range m.acct.ledger {
		g := got[i]
		if g.op != want.op || !slices.Equal(g.paid, want.paid) || !slices.Equal(g.dedup, want.dedup) || g.omitted != want.omitted || g.credits != want.credits {
			m.t.Fatalf("ledger entry %d: %+v, want %+v", i, g, want)
		}
	}
	if b := m.s.balance(m.acct.id); b != m.acct.balance {
		m.t.Fatalf("balance %d, the model's %d", b, m.acct.balance)
	}
}

// round asks a sample of every endpoint.
func (m *modelRun) round() {
	m.t.Helper()
	g := m.g
	for range 14 {
		m.listPlaces(g.pick(modelTownParams), "")
	}
	for range 22 {
		m.listPlaces(g.pick(modelTownParams), g.pick(modelQParams))
	}
	var located []modelPlace
	for _, id := range sortedKeys(m.c.places) {
		if p := m.c.places[id]; p.Lat != nil {
			located = append(located, p)
		}
	}
	for range 10 {
		switch g.r.IntN(4) {
		case 0: // on a place, which is at 0 km, and a radius exactly at another
			p, o := located[g.r.IntN(len(located))], located[g.r.IntN(len(located))]
			d := haversineKm(*p.Lat, *p.Lng, *o.Lat, *o.Lng)
			if d > 0 && d <= 50 {
				m.search(*p.Lat, *p.Lng, strconvG(d))
			} else {
				m.search(*p.Lat, *p.Lng, "")
			}
		case 1: // a corner of Kentucky's box
			m.search([]float64{kyLatMin, kyLatMax}[g.r.IntN(2)], []float64{kyLngMin, kyLngMax}[g.r.IntN(2)], "50")
		case 2:
			m.search(37.5+(g.r.Float64()-0.5)*0.3, -85.3+(g.r.Float64()-0.5)*0.3, strconvG(0.5+g.r.Float64()*20))
		default:
			m.search(37.5, -85.3, "")
		}
	}
	ids := sortedKeys(m.c.places)
	for range 25 {
		m.detail(ids[g.r.IntN(len(ids))])
	}
	m.detail("no-such-place")
	m.towns()
	evIDs := sortedKeys(m.c.events)
	for range 10 {
		// A day near the test clock's, or one beside an event's UTC day: its start is then on
		// a window's first or last day, or just outside it.
		day := func() string {
			if g.chance(0.5) {
				return start.AddDate(0, 0, -4+g.r.IntN(100)).Format(time.DateOnly)
			}
			at := m.c.events[evIDs[g.r.IntN(len(evIDs))]].Start.UTC().Truncate(24 * time.Hour)
			return at.AddDate(0, 0, g.r.IntN(3)-1).Format(time.DateOnly)
		}
		switch g.r.IntN(4) {
		case 0:
			m.events(g.pick(modelTownParams), "", "")
		case 1:
			d := day()
			m.events(g.pick(modelTownParams), d, d)
		case 2:
			m.events(g.pick(modelTownParams), day(), "")
		default:
			m.events(g.pick(modelTownParams), day(), day())
		}
	}
	for range 6 {
		limit := ""
		if g.chance(0.6) {
			limit = strconv.Itoa(1 + g.r.IntN(50))
		}
		m.hiddenGems(g.pick(modelTownParams), limit)
	}
	m.trending()
}

// shortOfCredits has accounts with a few credits ask a place list: rows are paid in order
// until the balance runs out, the rest left out and counted, 402 when none could be served.
func (m *modelRun) shortOfCredits() {
	m.t.Helper()
	saved := m.acct
	defer func() { m.acct = saved }()
	ids := sortedKeys(m.c.places)
	for range 4 {
		// A few places paid today first, as details: their rows are then free.
		balance, claimed := int64(m.g.r.IntN(4)), m.g.r.IntN(4)
		id, key := m.s.customerWithBalance(balance + int64(claimed))
		spent := modelEntry{op: "places.list", credits: 1000 - balance - int64(claimed)}
		for i := range spent.credits {
			spent.paid = append(spent.paid, fmt.Sprintf("place:spent-%d", i))
		}
		m.acct = &modelAccount{id: id, key: key, balance: balance + int64(claimed), ledger: []modelEntry{spent}}
		for range claimed {
			id := ids[m.g.r.IntN(len(ids))]
			m.metered("/api/data/places/"+id, "places.detail", []string{"place:" + id})
			m.countUsage(id)
		}
		m.listPlaces(m.g.pick(modelTownParams), m.g.pick([]string{"", "", "cafe", "food"}))
		m.ledger()
	}
}

func TestTheCatalogEndpointsAnswerAsTheDocumentedRulesComputeFromTheImport(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			g := &modelGen{r: rand.New(rand.NewPCG(seed, 0x6b79617069))}
			c, lines := g.generate(70, 30)
			s := newProjectedStack(t, lines)
			// The test clock stands still: no rate limit that it would hold for a minute.
			api := s.api
			api.RateLimitPerMinute = 1 << 30
			s.server = httptest.NewServer(api.Handler())
			t.Cleanup(s.server.Close)
			id, key := s.customer(2_500_000)
			m := &modelRun{t: t, s: s, g: g, c: c, usage: map[string]map[string]int{},
				acct: &modelAccount{id: id, key: key, balance: 5_000_000}}
			m.trending() // no usage yet: popularity alone
			m.round()
			m.shortOfCredits()

			// A re-import an hour later: places move, are renamed, events move.
			s.clock.Advance(time.Hour)
			s.importRecords(g.reimport(c, s.clock.Now())...)
			m.round()

			// The next UTC day: every claim is new again, yesterday's usage still counts.
			s.clock.Advance(13 * time.Hour)
			m.round()

			// Six days on: the first day's usage is out of trending's seven days.
			s.clock.Advance(6 * 24 * time.Hour)
			m.trending()
			m.round()
			m.ledger()
			t.Logf("%d places, %d events, %d requests", len(c.places), len(c.events), m.requests)
		})
	}
}
