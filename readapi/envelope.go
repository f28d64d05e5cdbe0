package readapi

import (
	"net/http"
	"strconv"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
)

// apiMeta is the envelope's meta (api-spec "Response envelope").
type apiMeta struct {
	CreditsUsed       int64 `json:"credits_used"`
	CreditsRemaining  int64 `json:"credits_remaining"`
	Count             *int  `json:"count,omitempty"`
	Deduplicated      bool  `json:"deduplicated"`
	DeduplicatedCount *int  `json:"deduplicated_count,omitempty"`
	Partial           *bool `json:"partial,omitempty"`
	OmittedUnpaid     *int  `json:"omitted_unpaid,omitempty"`
}

type envelope struct {
	Data any     `json:"data"`
	Meta apiMeta `json:"meta"`
}

// serveObject charges a fixed-cost operation for its one resource and writes data.
func (s *Server) serveObject(w http.ResponseWriter, r *http.Request, c caller, op domain.Operation, resource string, data any) error {
	return s.serveFixed(w, r, c, op, resource, data, nil)
}

// serveList is serveObject for a list payload, which meta counts.
func serveList[T any](s *Server, w http.ResponseWriter, r *http.Request, c caller, op domain.Operation, resource string, items []T) error {
	n := len(items)
	return s.serveFixed(w, r, c, op, resource, items, &n)
}

func (s *Server) serveFixed(w http.ResponseWriter, r *http.Request, c caller, op domain.Operation, resource string, data any, count *int) error {
	res, err := s.charge(r, c, op, []string{resource})
	if err != nil {
		return err
	}
	writeMetered(w, op, res, data, count)
	return nil
}

// serveRows charges a per-row operation, one resource per row in result order, and writes
// the rows the charge served: paid now or already paid today.
func serveRows[T any](s *Server, w http.ResponseWriter, r *http.Request, c caller, op domain.Operation, resources []string, rows []T) error {
	res, err := s.charge(r, c, op, resources)
	if err != nil {
		return err
	}
	served := make([]T, 0, len(rows))
	for i, ok := range res.Served {
		if ok {
			served = append(served, rows[i])
		}
	}
	n := len(served)
	writeMetered(w, op, res, served, &n)
	return nil
}

func (s *Server) charge(r *http.Request, c caller, op domain.Operation, resources []string) (commands.ChargeResult, error) {
	return s.Meter.Charge(r.Context(), commands.ChargeRequest{Caller: c, Operation: op, Resources: resources})
}

// writeMetered is the one place that builds meta and writes a metered success.
func writeMetered(w http.ResponseWriter, op domain.Operation, res commands.ChargeResult, data any, count *int) {
	meta := apiMeta{
		CreditsUsed:      res.Credits,
		CreditsRemaining: res.Balance,
		Count:            count,
		Deduplicated:     res.FullyDeduplicated(),
	}
	if op.PerRow() {
		n := len(res.Deduplicated)
		meta.DeduplicatedCount = &n
	}
	if res.Partial() {
		partial, omitted := true, res.OmittedUnpaid
		meta.Partial, meta.OmittedUnpaid = &partial, &omitted
	}
	w.Header().Set("X-Credits-Remaining", strconv.FormatInt(res.Balance, 10))
	httpx.WriteJSON(w, http.StatusOK, envelope{Data: data, Meta: meta})
}
