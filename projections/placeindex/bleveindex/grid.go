package bleveindex

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/kyapi/kyapi/projections/placeindex"
)

// cellDeg is the grid's cell size in degrees: about 5.5 x 4.4 km in Kentucky,
// so a default 5 km search reads a dozen cells and a 50 km one a few hundred.
const cellDeg = 0.05

// lngCells is the number of cells around the globe in one row.
const lngCells = int(360 / cellDeg)

type cellKey struct{ row, col int32 }

type point struct {
	id       string
	lat, lng float64
	category string
}

// grid holds every located place of one generation in lat/lng cells. bleve's
// own geo queries take tens of milliseconds on 150,000 places; this answers
// a 5 km search in microseconds.
type grid struct {
	mu    sync.RWMutex
	cells map[cellKey][]point
	where map[string]cellKey // place id to its cell, for moves and deletes
	// tops counts the points of each top-level category (placeindex.TopLevel) in each cell: a query of one
	// category that would read every occupied cell (related places looked for anywhere on
	// Earth) reads only the cells holding some of it.
	tops map[string]map[cellKey]int
}

func newGrid() *grid {
	return &grid{cells: map[cellKey][]point{}, where: map[string]cellKey{}, tops: map[string]map[cellKey]int{}}
}

func cellOf(lat, lng float64) cellKey {
	return cellKey{row: int32(math.Floor((lat + 90) / cellDeg)), col: wrapCol(int(math.Floor((lng + 180) / cellDeg)))}
}

func wrapCol(c int) int32 {
	return int32(((c % lngCells) + lngCells) % lngCells)
}

// apply puts docs and then removes deleteIDs, mirroring the bleve batch.
func (g *grid) apply(docs []placeindex.Doc, deleteIDs []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range docs {
		g.remove(d.PlaceID)
		if d.Location != nil {
			g.put(point{id: d.PlaceID, lat: d.Location.Lat, lng: d.Location.Lng, category: d.Category})
		}
	}
	for _, id := range deleteIDs {
		g.remove(id)
	}
}

func (g *grid) put(p point) {
	k := cellOf(p.lat, p.lng)
	g.cells[k] = append(g.cells[k], p)
	g.where[p.id] = k
	top := placeindex.TopLevel(p.category)
	in := g.tops[top]
	if in == nil {
		in = map[cellKey]int{}
		g.tops[top] = in
	}
	in[k]++
}

func (g *grid) remove(id string) {
	k, ok := g.where[id]
	if !ok {
		return
	}
	delete(g.where, id)
	pts := g.cells[k]
	i := slices.IndexFunc(pts, func(p point) bool { return p.id == id })
	if i < 0 {
		return
	}
	top := placeindex.TopLevel(pts[i].category)
	if in := g.tops[top]; in[k] > 1 {
		in[k]--
	} else {
		delete(in, k)
		if len(in) == 0 {
			delete(g.tops, top)
		}
	}
	last := len(pts) - 1
	pts[i] = pts[last]
	pts[last] = point{}
	if last == 0 {
		delete(g.cells, k)
		return
	}
	g.cells[k] = pts[:last]
}

// near answers a geo query from the grid. It reads the cells that can hold matches nearest
// first and keeps only the offset+limit nearest matches (a bounded heap): once that heap is
// full, a cell farther than all it keeps only adds to the count, which for a cell wholly
// inside the radius takes no distance at all. A wide radius so costs little more than its
// count.
func (g *grid) near(q placeindex.GeoQuery) placeindex.Result {
	limit, offset := placeindex.Page(q.Limit, q.Offset)
	if !(q.RadiusKm > 0) {
		return placeindex.Result{Hits: []placeindex.Hit{}}
	}
	match := func(p *point) bool {
		return p.id != q.ExcludeID && q.Matches(p.category)
	}
	near := nearest{keep: offset + limit}

	g.mu.RLock()
	var cells []cellBounds
	add := func(row, col int, pts []point) {
		if c := boundsOf(q.Center, row, col, pts); c.minKm <= q.RadiusKm {
			cells = append(cells, c)
		}
	}
	// counted is how many points of a cell match q, without reading them, where the cell's
	// counts say it: every point when q has no category, the points of q's top level when q's
	// category is one (related places); -1 otherwise.
	excluded, hasExcluded := g.where[q.ExcludeID]
	counted := func(c cellBounds) int {
		n := -1
		switch {
		case !q.ByCategory && q.CategoryPrefix == "":
			n = len(c.pts)
		case !strings.Contains(q.CategoryPrefix, "."):
			n = g.tops[q.CategoryPrefix][c.key]
		default:
			return -1
		}
		if hasExcluded && c.key == excluded {
			if i := slices.IndexFunc(c.pts, func(p point) bool { return p.id == q.ExcludeID }); i >= 0 && q.Matches(c.pts[i].category) {
				n--
			}
		}
		return n
	}
	rows, cols, ok := window(q.Center, q.RadiusKm)
	if ok && (rows[1]-rows[0]+1)*(cols[1]-cols[0]+1) <= len(g.cells) {
		for r := rows[0]; r <= rows[1]; r++ {
			for c := cols[0]; c <= cols[1]; c++ {
				if pts := g.cells[cellKey{row: int32(r), col: wrapCol(c)}]; len(pts) > 0 {
					add(r, c, pts)
				}
			}
		}
	} else if q.ByCategory || q.CategoryPrefix != "" {
		// The window covers a pole, or more cells than are occupied: the cells holding
		// the query's top-level category are all that can match.
		for k := range g.tops[placeindex.TopLevel(q.CategoryPrefix)] {
			add(int(k.row), int(k.col), g.cells[k])
		}
	} else {
		// The same without a category: reading every occupied cell is then the
		// cheaper way, and always correct.
		for k, pts := range g.cells {
			add(int(k.row), int(k.col), pts)
		}
	}
	slices.SortFunc(cells, func(a, b cellBounds) int { return cmp.Compare(a.minKm, b.minKm) })
	for _, c := range cells {
		if near.full() && c.minKm > near.heap[0].DistanceKm {
			// Nothing here is kept: count it.
			if c.maxKm <= q.RadiusKm {
				if n := counted(c); n >= 0 {
					near.total += n
					continue
				}
			}
			for i := range c.pts {
				p := &c.pts[i]
				if match(p) && (c.maxKm <= q.RadiusKm ||
					placeindex.DistanceKm(q.Center, placeindex.GeoPoint{Lat: p.lat, Lng: p.lng}) <= q.RadiusKm) {
					near.total++
				}
			}
			continue
		}
		for i := range c.pts {
			p := &c.pts[i]
			if !match(p) {
				continue
			}
			if d := placeindex.DistanceKm(q.Center, placeindex.GeoPoint{Lat: p.lat, Lng: p.lng}); d <= q.RadiusKm {
				near.add(placeindex.Hit{PlaceID: p.id, DistanceKm: d})
			}
		}
	}
	g.mu.RUnlock()

	hits := near.heap
	slices.SortFunc(hits, compareHits)
	page := hits[min(offset, len(hits)):]
	return placeindex.Result{Hits: slices.Clip(page), Total: near.total}
}

// cellBounds is an occupied cell with the least and the greatest distance of any point in it
// from a query's center, widened a little so that they are bounds whatever the rounding.
type cellBounds struct {
	pts          []point
	key          cellKey
	minKm, maxKm float64
}

func boundsOf(center placeindex.GeoPoint, row, col int, pts []point) cellBounds {
	const rad = math.Pi / 180
	lat0, lng0 := float64(row)*cellDeg-90, float64(col)*cellDeg-180
	lat1, lng1 := lat0+cellDeg, lng0+cellDeg
	at := func(lat, lng float64) float64 {
		return placeindex.DistanceKm(center, placeindex.GeoPoint{Lat: lat, Lng: lng})
	}
	// lng is compared unwrapped: the center is brought within half a turn of the cell.
	lng := center.Lng
	for lng < lng0-180 {
		lng += 360
	}
	for lng > lng1+180 {
		lng -= 360
	}
	// The nearest point of the cell: with the center's longitude inside the cell's, on the
	// center's meridian (a parallel's nearest point to it is at its longitude). Otherwise on the
	// cell's meridian edge nearer in longitude (any point of the cell has one on that edge, at
	// its latitude, no farther), where the nearest point of a whole meridian lies at
	// atan(tan(lat) / cos(dlng)) — poleward of the center's latitude, by a cell and more near
	// the poles — clamped to the edge, along which the distance only grows away from it. The
	// farthest point of the cell is a corner (along a parallel the distance grows with the
	// difference in longitude, along a meridian away from its nearest point).
	var minKm float64
	switch {
	case lng >= lng0 && lng <= lng1:
		minKm = at(min(max(center.Lat, lat0), lat1), lng)
	default:
		edge := lng0
		if lng > lng1 {
			edge = lng1
		}
		if d := math.Abs(edge - lng); d < 90 {
			nearest := math.Atan2(math.Tan(center.Lat*rad), math.Cos(d*rad)) / rad
			minKm = at(min(max(nearest, lat0), lat1), edge)
		} // else a quarter turn away or more: 0 is a bound
	}
	maxKm := max(at(lat0, lng0), at(lat0, lng1), at(lat1, lng0), at(lat1, lng1))
	const slackKm, slack = 0.05, 1e-3
	return cellBounds{pts: pts, key: cellKey{row: int32(row), col: wrapCol(col)}, minKm: minKm*(1-slack) - slackKm, maxKm: maxKm*(1+slack) + slackKm}
}

// compareHits orders hits nearest first, then by place id.
func compareHits(a, b placeindex.Hit) int {
	if c := cmp.Compare(a.DistanceKm, b.DistanceKm); c != 0 {
		return c
	}
	return cmp.Compare(a.PlaceID, b.PlaceID)
}

// nearest counts the hits it is given and keeps the keep first of them in compareHits order,
// in a heap whose root is the last of those kept.
type nearest struct {
	keep  int
	total int
	heap  []placeindex.Hit
}

// full reports whether a hit after the last kept is no longer kept.
func (n *nearest) full() bool { return n.keep > 0 && len(n.heap) == n.keep }

func (n *nearest) add(h placeindex.Hit) {
	n.total++
	if len(n.heap) < n.keep {
		n.heap = append(n.heap, h)
		for i := len(n.heap) - 1; i > 0; { // up
			parent := (i - 1) / 2
			if compareHits(n.heap[parent], n.heap[i]) >= 0 {
				break
			}
			n.heap[parent], n.heap[i] = n.heap[i], n.heap[parent]
			i = parent
		}
		return
	}
	if n.keep == 0 || compareHits(h, n.heap[0]) >= 0 {
		return
	}
	n.heap[0] = h
	for i := 0; ; { // down
		last, l, r := i, 2*i+1, 2*i+2
		if l < len(n.heap) && compareHits(n.heap[l], n.heap[last]) > 0 {
			last = l
		}
		if r < len(n.heap) && compareHits(n.heap[r], n.heap[last]) > 0 {
			last = r
		}
		if last == i {
			return
		}
		n.heap[i], n.heap[last] = n.heap[last], n.heap[i]
		i = last
	}
}

// window returns the inclusive row and (unwrapped) column ranges of the cells
// that can hold points within radiusKm of c, or ok=false when the bounding
// box reaches a pole.
func window(c placeindex.GeoPoint, radiusKm float64) (rows, cols [2]int, ok bool) {
	const rad = math.Pi / 180
	// A hair of slack so floating point never drops a cell on the boundary.
	ang := radiusKm/placeindex.EarthRadiusKm + 1e-9
	dLat := ang / rad
	if c.Lat+dLat >= 90 || c.Lat-dLat <= -90 {
		return rows, cols, false
	}
	// Widest longitude reached by the circle (the meridians tangent to it).
	s := math.Sin(ang) / math.Cos(c.Lat*rad)
	if s >= 1 {
		return rows, cols, false
	}
	dLng := math.Asin(s) / rad
	rows = [2]int{int(math.Floor((c.Lat - dLat + 90) / cellDeg)), int(math.Floor((c.Lat + dLat + 90) / cellDeg))}
	cols = [2]int{int(math.Floor((c.Lng - dLng + 180) / cellDeg)), int(math.Floor((c.Lng + dLng + 180) / cellDeg))}
	if cols[1]-cols[0]+1 >= lngCells {
		return rows, cols, false
	}
	return rows, cols, true
}
