package domain

// Operation is a metered read operation. Its price lives here and nowhere else.
type Operation string

const (
	OpPlaceList   Operation = "places.list"
	OpPlaceDetail Operation = "places.detail"
	OpPlaceMenu   Operation = "places.menu"
	OpReviews     Operation = "places.reviews"
	OpRelated     Operation = "places.related"
	OpSearch      Operation = "search"
	OpTrending    Operation = "trending"
	OpHiddenGems  Operation = "hidden-gems"
	OpTowns       Operation = "towns"
	OpEvents      Operation = "events"
)

var prices = map[Operation]struct {
	credits int64
	perRow  bool
}{
	OpPlaceList:   {1, true},
	OpPlaceDetail: {1, false},
	OpPlaceMenu:   {3, false},
	OpReviews:     {2, false},
	OpRelated:     {2, false},
	OpSearch:      {1, true},
	OpTrending:    {5, false},
	OpHiddenGems:  {5, false},
	OpTowns:       {10, false},
	OpEvents:      {5, false},
}

// Cost is the operation's price in credits: per row for per-row operations, per call otherwise.
func (o Operation) Cost() int64 { return prices[o].credits }

// PerRow reports whether the operation is paid per returned row.
func (o Operation) PerRow() bool { return prices[o].perRow }

// Known reports whether o is a priced operation.
func (o Operation) Known() bool { _, ok := prices[o]; return ok }

// UsageCounted reports whether requests of o count towards a place's trending score.
func (o Operation) UsageCounted() bool {
	switch o {
	case OpPlaceDetail, OpPlaceMenu, OpReviews, OpRelated:
		return true
	}
	return false
}

// operationOf is the operation named b: one of the constants above when it is one (no
// string is allocated for it), a copy of b otherwise.
func operationOf(b []byte) Operation {
	switch string(b) {
	case string(OpPlaceList):
		return OpPlaceList
	case string(OpPlaceDetail):
		return OpPlaceDetail
	case string(OpPlaceMenu):
		return OpPlaceMenu
	case string(OpReviews):
		return OpReviews
	case string(OpRelated):
		return OpRelated
	case string(OpSearch):
		return OpSearch
	case string(OpTrending):
		return OpTrending
	case string(OpHiddenGems):
		return OpHiddenGems
	case string(OpTowns):
		return OpTowns
	case string(OpEvents):
		return OpEvents
	}
	return Operation(b)
}
