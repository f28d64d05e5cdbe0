package demodata

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kyapi/kyapi/domain"
)

type placeRecord struct {
	Record         string         `json:"record"`
	PlaceID        string         `json:"place_id"`
	Name           string         `json:"name"`
	Category       string         `json:"category"`
	Address        string         `json:"address"`
	TownSlug       string         `json:"town_slug"`
	Latitude       float64        `json:"latitude"`
	Longitude      float64        `json:"longitude"`
	IsGem          bool           `json:"is_gem"`
	LocalGemScore  *float64       `json:"local_gem_score"`
	Phone          *string        `json:"phone"`
	Website        *string        `json:"website"`
	Rating         *float64       `json:"rating"`
	RatingCount    *int           `json:"rating_count"`
	SEODescription *string        `json:"seo_description"`
	Hours          *weekHours     `json:"hours"`
	Description    *string        `json:"description"`
	EnrichmentTier string         `json:"enrichment_tier"`
	IsChain        bool           `json:"is_chain"`
	Menu           []menuItem     `json:"menu,omitempty"`
	ReviewSummary  *reviewSummary `json:"review_summary,omitempty"`
	Sources        placeSources   `json:"sources"`
}

type interval struct {
	Open  string `json:"open"`
	Close string `json:"close"`
}

// weekHours lists every day; a closed day is an empty array, not a missing key.
type weekHours struct {
	Mon []interval `json:"mon"`
	Tue []interval `json:"tue"`
	Wed []interval `json:"wed"`
	Thu []interval `json:"thu"`
	Fri []interval `json:"fri"`
	Sat []interval `json:"sat"`
	Sun []interval `json:"sun"`
}

func (h *weekHours) days() [7]*[]interval {
	return [7]*[]interval{&h.Mon, &h.Tue, &h.Wed, &h.Thu, &h.Fri, &h.Sat, &h.Sun}
}

type menuItem struct {
	Name        string   `json:"name"`
	Description *string  `json:"description"`
	Price       *float64 `json:"price"`
	Currency    string   `json:"currency"`
	Section     *string  `json:"section"`
}

type reviewSummary struct {
	Headline    string  `json:"headline"`
	Summary     string  `json:"summary"`
	Confidence  float64 `json:"confidence"`
	ReviewCount int     `json:"review_count"`
	GeneratedAt string  `json:"generated_at"`
}

type observation struct {
	Source     string `json:"source"`
	Value      any    `json:"value"`
	ObservedAt string `json:"observed_at"`
}

type placeSources struct {
	Phone   []observation `json:"phone,omitempty"`
	Website []observation `json:"website,omitempty"`
	Address []observation `json:"address,omitempty"`
	Hours   []observation `json:"hours,omitempty"`
}

// writePlaces walks the towns in order and streams each town's share of places.
func (g *generator) writePlaces() error {
	index := 0
	for ti := range g.towns {
		for range g.counts[ti] {
			p := g.makePlace(ti, index)
			if err := g.enc.Encode(p); err != nil {
				return err
			}
			g.stats.Places++
			g.stats.PlaceIDs = append(g.stats.PlaceIDs, p.PlaceID)
			if len(p.Menu) > 0 {
				g.stats.Menus++
			}
			if p.ReviewSummary != nil {
				g.stats.Reviews++
			}
			index++
		}
	}
	return nil
}

func (g *generator) makePlace(ti, index int) *placeRecord {
	r := g.rng
	t := g.towns[ti]
	town := postalName(t)
	p := &placeRecord{
		Record:   "place",
		PlaceID:  makeID("plc_", g.cfg.Seed, idPlace, index),
		TownSlug: t.Slug,
	}

	// Who is it: a chain location, a commonly named independent, or a one-off.
	chainP := 0.07
	switch {
	case t.Population < 1500:
		chainP = 0.02
	case t.Population < 10000:
		chainP = 0.05
	}
	brand := -1
	fresh := false
	var cat category
	switch roll := r.Float64(); {
	case roll < chainP:
		brand = r.IntN(len(chainBrands))
		b := chainBrands[brand]
		p.Name, p.IsChain = b.name, true
		cat = categories[g.catIndex[b.category]]
	case roll < chainP+0.012:
		s := pick(r, sharedNames)
		p.Name = s.name
		cat = categories[g.catIndex[s.category]]
	default:
		cat = categories[g.pickCategory()]
		p.Name, fresh = g.independentName(cat, t, index)
	}
	p.Category = cat.id

	// Where: scattered around the centre, denser near it.
	angle := r.Float64() * 2 * math.Pi
	dist := spreadKm(t) * r.Float64()
	p.Latitude = round(t.Lat+dist*math.Cos(angle)/111.32, 6)
	p.Longitude = round(t.Lng+dist*math.Sin(angle)/(111.32*math.Cos(t.Lat*math.Pi/180)), 6)
	zip := townZip(t)
	if t.Population > 100000 {
		zip = zip - zip%100 + 2 + r.IntN(17)
	}
	number := 1 + r.IntN(min(9999, 200+t.Population/20))
	p.Address = fmt.Sprintf("%d %s, %s, KY %05d", number, pick(r, streets), town, zip)

	// Contact details. Outdoor places often have neither phone nor site.
	phoneP, siteP := 0.92, 0.6
	if strings.HasPrefix(cat.id, "outdoors.") {
		phoneP, siteP = 0.4, 0.3
	}
	if p.IsChain || r.Float64() < phoneP {
		p.Phone = ptr(phoneNumber(r, areaCode(t)))
	}
	switch {
	case p.IsChain:
		p.Website = ptr("https://" + chainBrands[brand].domain + ".example/locations/" + t.Slug)
	case r.Float64() < siteP:
		host := domain.Slugify(p.Name)
		if !fresh {
			host += "-" + strings.SplitN(t.Slug, "-", 2)[0]
		}
		p.Website = ptr("https://" + host + ".example")
	}

	// Gems are rare, never chains or errands, and keep their name to themselves.
	p.IsGem = fresh && !cat.gemless && r.Float64() < 0.088
	if p.IsGem {
		g.names[nameKey(p.Name)] = reservedName
		p.LocalGemScore = ptr(round(0.70+0.29*r.Float64(), 2))
	} else if !p.IsChain && r.Float64() < 0.55 {
		p.LocalGemScore = ptr(round(0.05+0.6*r.Float64(), 2))
	}

	switch {
	case p.IsGem:
		p.Rating = ptr(round(4.4+0.6*r.Float64(), 1))
		p.RatingCount = ptr(15 + r.IntN(300))
	case p.IsChain || r.Float64() < 0.92:
		mean := 4.1
		if p.IsChain {
			mean = 3.6
		}
		p.Rating = ptr(round(math.Max(1, math.Min(5, mean+0.55*r.NormFloat64())), 1))
		n := 1 + int(math.Exp(3.2+1.1*r.NormFloat64()))
		if p.IsChain {
			n *= 3
		}
		p.RatingCount = ptr(n)
	}

	switch roll := r.Float64(); {
	case roll < 0.15 || (p.IsGem && roll < 0.5):
		p.EnrichmentTier = "premium"
	case roll < 0.5:
		p.EnrichmentTier = "enhanced"
	default:
		p.EnrichmentTier = "basic"
	}

	k1, k2 := twoOf(r, cat.known)
	if r.Float64() < 0.9 {
		p.SEODescription = ptr(fmt.Sprintf("%s is a %s in %s, Kentucky, known for %s and %s.", p.Name, cat.noun, town, k1, k2))
	}
	if r.Float64() < byTier(p.EnrichmentTier, 1, 0.7, 0.25) {
		p.Description = ptr(fmt.Sprintf("%s has served %s since %d. Locals come for %s; visitors remember %s.",
			p.Name, town, 1946+r.IntN(77), k1, k2))
	}

	switch {
	case p.IsChain:
		p.Hours = g.chainHours[brand]
	case r.Float64() < 0.85:
		p.Hours = makeHours(r, cat.hours)
	}

	if cat.menu != noMenu {
		switch {
		case p.IsChain:
			p.Menu = g.chainMenus[brand]
		case r.Float64() < 0.85:
			p.Menu = makeMenu(r, cat.menu)
		}
	}

	// Richer enrichment tiers come with review summaries more often; ~60% overall.
	if r.Float64() < byTier(p.EnrichmentTier, 0.9, 0.7, 0.45) {
		p.ReviewSummary = g.makeReview(p, cat)
	}

	p.Sources = g.makeSources(p)

	if cat.venue != notVenue && len(g.venues[ti]) < 12 {
		g.venues[ti] = append(g.venues[ti], venue{p.PlaceID, p.Name, cat.venue})
	}
	return p
}

func byTier(tier string, premium, enhanced, basic float64) float64 {
	switch tier {
	case "premium":
		return premium
	case "enhanced":
		return enhanced
	}
	return basic
}

func (g *generator) pickCategory() int {
	n := g.rng.IntN(g.catWeights[len(g.catWeights)-1])
	return sort.SearchInts(g.catWeights, n+1)
}

// independentName invents a name, allowing each at most twice across the catalog so
// that only chains and sharedNames look like chains. fresh reports a first use.
func (g *generator) independentName(cat category, t Town, index int) (name string, fresh bool) {
	r := g.rng
	for try := 0; try < 12; try++ {
		core := pick(r, cat.cores)
		switch roll := r.Float64(); {
		case try >= 8:
			// Crowded towns run out of short names; the street makes it distinct.
			name = possessive(pick(r, familyNames)) + " " + core + " on " + pick(r, streetNames)
		case roll < 0.3:
			name = localName(r, t) + " " + core
		case roll < 0.6:
			name = pick(r, namePrefixes) + " " + core
		case roll < 0.85:
			name = possessive(pick(r, familyNames)) + " " + core
		default:
			name = pick(r, streetNames) + " " + core
		}
		key := nameKey(name)
		if n := g.names[key]; n < 2 {
			g.names[key] = n + 1
			return name, n == 0
		}
	}
	// The index makes it unique, like a franchise number on a sign.
	name = fmt.Sprintf("%s %s No. %d", postalName(t), pick(r, cat.cores), index+1)
	g.names[nameKey(name)] = 1
	return name, true
}

// localName is the town, or in the two big cities often a neighbourhood, as a
// business would put it in its name.
func localName(r *rand.Rand, t Town) string {
	if hoods := neighbourhoods[t.Slug]; len(hoods) > 0 && r.Float64() < 0.7 {
		return pick(r, hoods)
	}
	return postalName(t)
}

func possessive(who string) string {
	if strings.HasSuffix(who, "s") {
		return who + "'"
	}
	return who + "'s"
}

// nameKey normalizes a name the way a duplicate check would: case, spaces and
// punctuation do not count. It hashes in place because it runs for every name tried.
func nameKey(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			h ^= uint64(c)
			h *= 1099511628211
		}
	}
	return h
}

// phoneNumber uses the 555-0100..555-0199 range, which is reserved for fiction.
func phoneNumber(r *rand.Rand, area string) string {
	return fmt.Sprintf("+1-%s-555-01%02d", area, r.IntN(100))
}

func twoOf(r *rand.Rand, s []string) (string, string) {
	i := r.IntN(len(s))
	j := (i + 1 + r.IntN(len(s)-1)) % len(s)
	return s[i], s[j]
}

func round(x float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(x*p) / p
}

// makeHours draws opening hours typical of the kind of business.
func makeHours(r *rand.Rand, kind hoursKind) *weekHours {
	h := &weekHours{}
	set := func(open, close string, days ...int) {
		d := h.days()
		for _, i := range days {
			*d[i] = []interval{{open, close}}
		}
	}
	switch kind {
	case hoursRestaurant:
		open := pick(r, []string{"11:00", "11:00", "10:30", "07:00"})
		close := pick(r, []string{"21:00", "20:00", "21:30"})
		set(open, close, 0, 1, 2, 3, 6)
		set(open, "22:00", 4, 5)
		if r.Float64() < 0.25 {
			// Lunch and dinner service with a break in between.
			days := h.days()
			for _, d := range days[1:6] {
				*d = []interval{{open, "14:00"}, {"17:00", close}}
			}
		}
		if r.Float64() < 0.3 {
			h.Mon = nil
		}
		if r.Float64() < 0.2 {
			h.Sun = nil
		}
	case hoursCafe:
		open := pick(r, []string{"06:30", "07:00", "07:30"})
		set(open, pick(r, []string{"14:00", "15:00", "17:00"}), 0, 1, 2, 3, 4, 5)
		if r.Float64() < 0.6 {
			set("08:00", "13:00", 6)
		}
	case hoursBar:
		set("16:00", "23:00", 0, 1, 2, 3)
		set("12:00", "23:30", 4, 5)
		if r.Float64() < 0.7 {
			set("13:00", "22:00", 6)
		}
		if r.Float64() < 0.3 {
			h.Mon = nil
		}
	case hoursShop:
		open := pick(r, []string{"09:00", "10:00"})
		set(open, pick(r, []string{"17:00", "18:00", "19:00"}), 0, 1, 2, 3, 4, 5)
		if r.Float64() < 0.45 {
			set("12:00", "17:00", 6)
		}
	case hoursOffice:
		set("08:00", pick(r, []string{"17:00", "17:30", "18:00"}), 0, 1, 2, 3, 4)
		if r.Float64() < 0.4 {
			set("08:00", "12:00", 5)
		}
	case hoursDaylight:
		set(pick(r, []string{"06:00", "07:00", "08:00"}), pick(r, []string{"20:00", "21:00", "22:00"}), 0, 1, 2, 3, 4, 5, 6)
	case hoursAlways:
		set("00:00", "23:59", 0, 1, 2, 3, 4, 5, 6)
	}
	for _, d := range h.days() {
		if *d == nil {
			*d = []interval{}
		}
	}
	return h
}

// closingEarlier is the same week closing an hour earlier: what an outdated listing
// typically says.
func closingEarlier(h *weekHours) *weekHours {
	out := &weekHours{}
	src, dst := h.days(), out.days()
	for i := range src {
		*dst[i] = make([]interval, len(*src[i]))
		for j, iv := range *src[i] {
			hh, _ := strconv.Atoi(iv.Close[:2])
			(*dst[i])[j] = interval{iv.Open, fmt.Sprintf("%02d%s", max(hh-1, 0), iv.Close[2:])}
		}
	}
	return out
}

// makeMenu picks 3 to 12 dishes of the kind, kept in menu order so sections group.
func makeMenu(r *rand.Rand, kind menuKind) []menuItem {
	dishes := menus[kind]
	if len(dishes) == 0 {
		return nil
	}
	n := 3 + r.IntN(min(10, len(dishes)-2))
	chosen := r.Perm(len(dishes))[:n]
	sort.Ints(chosen)
	items := make([]menuItem, 0, n)
	for _, i := range chosen {
		d := dishes[i]
		cents := pick(r, []int{0, 50, 95, 99})
		item := menuItem{
			Name:     d.name,
			Price:    ptr(float64(d.lo+r.IntN(d.hi-d.lo+1)) + float64(cents)/100),
			Currency: "USD",
			Section:  ptr(d.section),
		}
		if d.desc != "" {
			item.Description = ptr(d.desc)
		}
		items = append(items, item)
	}
	return items
}

func (g *generator) makeReview(p *placeRecord, cat category) *reviewSummary {
	r := g.rng
	count := 3 + r.IntN(20)
	if p.RatingCount != nil {
		count = max(1, int(float64(*p.RatingCount)*(0.6+0.4*r.Float64())))
	}
	rating := 4.0
	if p.Rating != nil {
		rating = *p.Rating
	}
	k1, k2 := twoOf(r, cat.known)
	var headline, summary string
	switch complaint := pick(r, reviewComplaints); {
	case rating >= 4.5:
		headline = "A local favourite for " + k1
		summary = fmt.Sprintf("Reviewers rave about %s and %s, and about staff who treat regulars like family. The only complaint is %s.", k1, k2, complaint)
	case rating >= 4.0:
		headline = "Dependable " + cat.noun + " with " + k1
		summary = fmt.Sprintf("Most reviewers recommend %s and mention %s; a few point to %s.", k1, k2, complaint)
	case rating >= 3.0:
		headline = "Mixed reviews, but fans single out " + k1
		summary = fmt.Sprintf("Opinions are split: %s gets praise, while several reviewers mention %s.", k1, complaint)
	default:
		headline = "Reviewers report uneven experiences"
		summary = fmt.Sprintf("Recent reviews are mostly critical, citing %s, though some still like %s.", complaint, k1)
	}
	conf := 0.5 + 0.35*math.Min(1, math.Log10(float64(count)+1)/3) + 0.1*r.Float64()
	return &reviewSummary{
		Headline:    headline,
		Summary:     summary,
		Confidence:  round(math.Min(conf, 0.99), 2),
		ReviewCount: count,
		GeneratedAt: g.pastTime(1 + r.IntN(120)),
	}
}

// makeSources invents observations of each contact field so that every field_trust tier
// (docs/api.md, "Places") occurs: none, thin, supported, verified, and low (disagreeing or
// stale).
func (g *generator) makeSources(p *placeRecord) placeSources {
	r := g.rng
	var s placeSources
	if p.Phone != nil {
		s.Phone = g.observe(*p.Phone, func() any {
			alt := *p.Phone
			for alt == *p.Phone {
				alt = phoneNumber(r, (*p.Phone)[3:6])
			}
			return alt
		})
	}
	if p.Website != nil {
		s.Website = g.observe(*p.Website, func() any { return strings.Replace(*p.Website, ".example", "-ky.example", 1) })
	}
	s.Address = g.observe(p.Address, func() any {
		number, rest, _ := strings.Cut(p.Address, " ")
		n, _ := strconv.Atoi(number)
		return strconv.Itoa(n+2) + " " + rest
	})
	if p.Hours != nil {
		s.Hours = g.observe(p.Hours, func() any { return closingEarlier(p.Hours) })
	}
	return s
}

// observe returns the observations of one field, oldest first. value is the current
// value; other gives what an outdated or wrong source says instead.
func (g *generator) observe(value any, other func() any) []observation {
	r := g.rng
	var n, newest int // number of sources, age in days of the newest one
	disagree := false
	switch roll := r.Float64(); {
	case roll < 0.10:
		return nil
	case roll < 0.30: // thin
		n, newest = 1, 5+r.IntN(300)
	case roll < 0.55: // supported
		n, newest = 2, 5+r.IntN(300)
	case roll < 0.80: // verified
		n, newest = 3+r.IntN(2), 1+r.IntN(170)
	case roll < 0.92: // low: sources disagree
		n, newest, disagree = 2+r.IntN(3), 1+r.IntN(300), true
	default: // low: stale
		n, newest = 2+r.IntN(2), 400+r.IntN(330)
	}
	names := r.Perm(len(sourceNames))[:n]
	obs := make([]observation, n)
	age := newest
	for i := n - 1; i >= 0; i-- {
		obs[i] = observation{Source: sourceNames[names[i]], Value: value, ObservedAt: g.pastTime(age)}
		age += 1 + r.IntN(200)
	}
	if disagree {
		// Usually an old listing is out of date; sometimes the newest one is wrong.
		i := 0
		if r.Float64() < 0.3 {
			i = n - 1
		}
		obs[i].Value = other()
	}
	return obs
}

// pastTime is a moment daysAgo days before today, at a random time of day.
func (g *generator) pastTime(daysAgo int) string {
	t := g.today.AddDate(0, 0, -daysAgo).Add(time.Duration(g.rng.IntN(86400)) * time.Second)
	return t.Format(time.RFC3339)
}
