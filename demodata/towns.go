package demodata

import (
	_ "embed"
	"encoding/csv"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// townsCSV is the Census/USGS list of Kentucky's 418 incorporated places; see ATTRIBUTION.md.
//
//go:embed ky-towns.csv
var townsCSV string

// Town is one Kentucky incorporated place with its real Census population and
// town-centre coordinates.
type Town struct {
	Slug       string
	Name       string
	County     string
	Population int
	Lat        float64
	Lng        float64
}

var parsedTowns = sync.OnceValues(func() ([]Town, error) { return parseTowns(townsCSV) })

// Towns returns the 418 Kentucky towns, sorted by slug. The caller owns the slice.
func Towns() []Town {
	towns, err := parsedTowns()
	if err != nil {
		// The file is embedded and covered by tests, so this is a build defect.
		panic(err)
	}
	return slices.Clone(towns)
}

func parseTowns(text string) ([]Town, error) {
	rows, err := csv.NewReader(strings.NewReader(text)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("demodata: read ky-towns.csv: %w", err)
	}
	if len(rows) < 2 || strings.Join(rows[0], ",") != "slug,name,county,population,latitude,longitude" {
		return nil, fmt.Errorf("demodata: ky-towns.csv has an unexpected header")
	}
	towns := make([]Town, 0, len(rows)-1)
	for i, r := range rows[1:] {
		pop, err1 := strconv.Atoi(r[3])
		lat, err2 := strconv.ParseFloat(r[4], 64)
		lng, err3 := strconv.ParseFloat(r[5], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("demodata: ky-towns.csv line %d: bad number", i+2)
		}
		towns = append(towns, Town{Slug: r[0], Name: r[1], County: r[2], Population: pop, Lat: lat, Lng: lng})
	}
	return towns, nil
}

// postalName is the name people write on an envelope or a shop sign; the two
// consolidated governments carry long legal names in the Census file.
func postalName(t Town) string {
	switch t.Slug {
	case "lexington-fayette-urban-county":
		return "Lexington"
	case "louisville-jefferson-county-metro-government-balance":
		return "Louisville"
	}
	return t.Name
}

// placeCounts shares n places among towns in proportion to population, by largest
// remainder so the counts add up exactly. When there are enough places every town
// gets at least one, so even South Park View (population 0) has a place.
func placeCounts(towns []Town, n int) []int {
	counts := make([]int, len(towns))
	rest := n
	if n >= len(towns) {
		for i := range counts {
			counts[i] = 1
		}
		rest -= len(towns)
	}
	total := 0
	for _, t := range towns {
		total += t.Population
	}
	type share struct {
		town int
		frac float64
	}
	shares := make([]share, len(towns))
	given := 0
	for i, t := range towns {
		q := float64(rest) * float64(t.Population) / float64(total)
		whole := int(math.Floor(q))
		counts[i] += whole
		given += whole
		shares[i] = share{i, q - float64(whole)}
	}
	slices.SortStableFunc(shares, func(a, b share) int {
		switch {
		case a.frac > b.frac:
			return -1
		case a.frac < b.frac:
			return 1
		}
		return 0
	})
	for k := 0; given < rest; k++ {
		counts[shares[k].town]++
		given++
	}
	return counts
}

// spreadKm is how far from the town centre places are scattered: half a kilometre for a
// hamlet, up to 12 km for Louisville and Lexington.
func spreadKm(t Town) float64 {
	return min(12, 0.5+11.5*math.Sqrt(float64(t.Population)/322570))
}

// zipPrefixes are rough centres of Kentucky's three-digit ZIP areas; a town takes the
// nearest one, which is plausible rather than exact.
var zipPrefixes = []struct {
	prefix   int
	lat, lng float64
}{
	{400, 38.20, -85.30}, {402, 38.22, -85.70}, {403, 38.30, -84.45}, {404, 37.60, -84.45},
	{405, 38.04, -84.50}, {406, 38.20, -84.87}, {407, 37.00, -84.10}, {408, 36.80, -83.35},
	{410, 38.95, -84.55}, {411, 38.40, -82.75}, {412, 37.85, -82.85}, {413, 37.55, -83.40},
	{414, 37.95, -83.25}, {415, 37.48, -82.52}, {416, 37.65, -82.80}, {417, 37.25, -83.20},
	{418, 37.10, -82.85}, {420, 36.90, -88.55}, {421, 37.00, -86.20}, {422, 36.85, -87.45},
	{423, 37.75, -87.10}, {424, 37.45, -87.65}, {425, 37.10, -84.60}, {426, 36.85, -84.90},
	{427, 37.50, -85.70},
}

// townZip is the town's main ZIP code: its area prefix and a suffix fixed by its slug.
func townZip(t Town) int {
	best, bestD := 0, math.Inf(1)
	for i, z := range zipPrefixes {
		d := (z.lat-t.Lat)*(z.lat-t.Lat) + (z.lng-t.Lng)*(z.lng-t.Lng)
		if d < bestD {
			best, bestD = i, d
		}
	}
	suffix := 3 + int(fnv64(t.Slug)%85) // 03..87 keeps every code inside KY's 40003..42788
	return zipPrefixes[best].prefix*100 + suffix
}

// areaCode picks the Kentucky area code of the region the town lies in.
func areaCode(t Town) string {
	switch {
	case t.Lat > 38.75 && t.Lng > -84.9: // Northern Kentucky
		return "859"
	case t.Lng < -85.95, t.Lat < 37.5 && t.Lng < -85.0:
		return "270"
	case t.Lng > -84.05, t.Lat < 37.35:
		return "606"
	case t.Lng < -84.85:
		return "502"
	}
	return "859"
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
