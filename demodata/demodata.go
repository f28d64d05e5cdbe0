// Package demodata generates a deterministic, fictional Kentucky catalog on top of the
// real list of Kentucky towns, in the catalog import format (NDJSON; docs/api.md, "Catalog
// import").
//
// The towns are real (Census and USGS, see ATTRIBUTION.md); every place, menu, review
// and event is invented, with 555-01xx phone numbers and .example websites. The same
// Config always yields byte-identical output, so demos, tests and benchmarks can rely on
// it.
package demodata

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// DefaultPlaces is the catalog size when Config.Places is zero.
const DefaultPlaces = 20000

// EventCount is how many upcoming events every catalog has, whatever its size.
const EventCount = 600

// eventHorizonDays is how far ahead of Config.Today events are scheduled.
const eventHorizonDays = 120

// Config chooses the catalog. Only Today is required.
type Config struct {
	// Places is the number of place records; 0 means DefaultPlaces.
	Places int
	// Seed selects the catalog; 0 means 1. Different seeds give different catalogs.
	Seed int64
	// Today is the UTC date events and source observations are relative to; its time
	// of day is ignored.
	Today time.Time
}

// Stats counts what Write wrote. Menus and Reviews count places that have a menu or a
// review summary.
type Stats struct {
	Towns, Places, Events, Menus, Reviews int
	PlaceIDs                              []string // every place written, in order
}

// Write streams the catalog to w as NDJSON: first all towns, then the places, then the
// events, one record a line.
func Write(w io.Writer, cfg Config) (Stats, error) {
	if cfg.Today.IsZero() {
		return Stats{}, errors.New("demodata: Config.Today is required")
	}
	if cfg.Places < 0 {
		return Stats{}, fmt.Errorf("demodata: Config.Places must not be negative, got %d", cfg.Places)
	}
	if cfg.Places == 0 {
		cfg.Places = DefaultPlaces
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}

	bw := bufio.NewWriterSize(w, 1<<18)
	enc := json.NewEncoder(bw)
	// Names like "Town & Country Antiques" should stay readable in the file.
	enc.SetEscapeHTML(false)

	g := newGenerator(cfg, enc)
	for _, step := range []func() error{g.writeTowns, g.writePlaces, g.writeEvents} {
		if err := step(); err != nil {
			return g.stats, fmt.Errorf("demodata: write: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return g.stats, fmt.Errorf("demodata: write: %w", err)
	}
	return g.stats, nil
}

// generator holds the state of one Write. Everything random comes from rng, consumed in
// a fixed order, which is what makes the output reproducible.
type generator struct {
	cfg    Config
	today  time.Time
	rng    *rand.Rand
	enc    *json.Encoder
	towns  []Town
	counts []int // places per town, same order as towns
	stats  Stats

	catWeights []int // cumulative category weights
	catIndex   map[string]int

	// names counts how often each normalized place name is used, so that apart from
	// chains and sharedNames no name reaches the 3 uses that make a place a chain.
	names map[uint64]uint8

	venues [][]venue // per town: places that can host an event

	chainMenus [][]menuItem
	chainHours []*weekHours
}

type venue struct {
	id, name string
	kind     venueKind
}

// reservedName marks names that must not be reused: hidden gems, chain brands and the
// shared independent names.
const reservedName = 255

func newGenerator(cfg Config, enc *json.Encoder) *generator {
	y, m, d := cfg.Today.UTC().Date()
	g := &generator{
		cfg:      cfg,
		today:    time.Date(y, m, d, 0, 0, 0, 0, time.UTC),
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6b79617069)),
		enc:      enc,
		towns:    Towns(),
		catIndex: make(map[string]int, len(categories)),
		names:    make(map[uint64]uint8, cfg.Places),
	}
	g.counts = placeCounts(g.towns, cfg.Places)
	g.venues = make([][]venue, len(g.towns))
	sum := 0
	for i, c := range categories {
		sum += c.weight
		g.catWeights = append(g.catWeights, sum)
		g.catIndex[c.id] = i
	}
	for _, s := range sharedNames {
		g.names[nameKey(s.name)] = reservedName
	}
	// Each brand has one menu and one set of hours everywhere, drawn from its own
	// stream so that the main sequence does not depend on how many brands there are.
	for i, b := range chainBrands {
		g.names[nameKey(b.name)] = reservedName
		r := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(i)+1))
		cat := categories[g.catIndex[b.category]]
		g.chainMenus = append(g.chainMenus, makeMenu(r, cat.menu))
		g.chainHours = append(g.chainHours, makeHours(r, cat.hours))
	}
	return g
}

func (g *generator) writeTowns() error {
	type townRecord struct {
		Record     string `json:"record"`
		Slug       string `json:"slug"`
		Name       string `json:"name"`
		County     string `json:"county"`
		Population int    `json:"population"`
	}
	for _, t := range g.towns {
		if err := g.enc.Encode(townRecord{"town", t.Slug, t.Name, t.County, t.Population}); err != nil {
			return err
		}
		g.stats.Towns++
	}
	return nil
}

// Kinds of generated id, so places and events never share an id sequence.
const (
	idPlace uint64 = 1
	idEvent uint64 = 2
)

// makeID derives a stable, URL-safe id: prefix + 12 hex digits. The index goes through
// a bijection on 48 bits keyed by the seed, so ids are unique within a catalog yet
// look random and differ between seeds.
func makeID(prefix string, seed int64, kind uint64, index int) string {
	const mask = 1<<48 - 1
	k := splitmix64(uint64(seed)*0x9e3779b97f4a7c15 ^ kind)
	x := (uint64(index) + k) & mask
	x = (x * (splitmix64(k) | 1)) & mask
	x ^= x >> 23
	x = (x * 0x5deece66d) & mask
	x ^= x >> 19
	var b [6]byte
	for i := range b {
		b[i] = byte(x >> (40 - 8*i))
	}
	return prefix + hex.EncodeToString(b[:])
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// pick returns a uniformly chosen element.
func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func ptr[T any](v T) *T { return &v }
