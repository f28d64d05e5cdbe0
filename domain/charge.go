package domain

// ChargeDecision is the outcome of metering one request.
type ChargeDecision struct {
	// Served[i] tells whether resource i is returned to the client.
	Served []bool
	// Paid are the resources charged now; they are claimed for the rest of the UTC day.
	Paid []string
	// Deduplicated are the served resources that were free because already paid today.
	Deduplicated  []string
	Credits       int64
	OmittedUnpaid int
}

// Partial reports whether rows were left out because they could not be paid.
func (d ChargeDecision) Partial() bool { return d.OmittedUnpaid > 0 }

// FullyDeduplicated reports whether the request was free only because of deduplication.
func (d ChargeDecision) FullyDeduplicated() bool {
	return d.Credits == 0 && len(d.Deduplicated) > 0
}

// DecideCharge meters a request for resources (one for a fixed-cost operation, the result
// rows in order for a per-row one) against balance. claimed tells which resources the
// account already paid today.
//
// Fixed cost: deduplicated is free even at zero balance; otherwise a balance below the cost
// is ErrInsufficientCredits. Per row: rows are paid in order while the balance lasts,
// deduplicated rows are free wherever they stand, unpaid rows are omitted; if rows matched
// but none can be served, ErrInsufficientCredits. Never spends more than balance.
func DecideCharge(op Operation, resources []string, balance int64, claimed func(string) bool) (ChargeDecision, error) {
	d := ChargeDecision{Served: make([]bool, len(resources))}
	cost := op.Cost()
	if !op.PerRow() {
		if len(resources) != 1 {
			panic("domain: a fixed-cost operation meters exactly one resource")
		}
		if claimed(resources[0]) {
			d.Served[0] = true
			d.Deduplicated = resources
			return d, nil
		}
		if balance < cost {
			return ChargeDecision{}, ErrInsufficientCredits
		}
		d.Served[0] = true
		d.Paid = resources
		d.Credits = cost
		return d, nil
	}
	seen := make(map[string]bool, len(resources))
	for i, r := range resources {
		switch {
		case claimed(r) || seen[r]:
			d.Served[i] = true
			d.Deduplicated = append(d.Deduplicated, r)
		case balance-d.Credits >= cost:
			d.Served[i] = true
			d.Paid = append(d.Paid, r)
			d.Credits += cost
			seen[r] = true
		default:
			d.OmittedUnpaid++
		}
	}
	if len(resources) > 0 && d.OmittedUnpaid == len(resources) {
		return ChargeDecision{}, ErrInsufficientCredits
	}
	return d, nil
}
