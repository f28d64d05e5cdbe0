package readapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
)

// apiMeta is the envelope's meta (docs/api.md, "Envelope and meta").
type apiMeta struct {
	CreditsUsed       int64 `json:"credits_used"`
	CreditsRemaining  int64 `json:"credits_remaining"`
	Count             *int  `json:"count,omitempty"`
	Deduplicated      bool  `json:"deduplicated"`
	DeduplicatedCount *int  `json:"deduplicated_count,omitempty"`
	Partial           *bool `json:"partial,omitempty"`
	OmittedUnpaid     *int  `json:"omitted_unpaid,omitempty"`
}

// rawJSON is a payload stored already encoded, as encoding/json writes it (HTML escaped,
// compact): the envelope writes it as is, without decoding or re-validating it.
type rawJSON []byte

// jsonArray joins encoded items into one JSON array.
func jsonArray(items []rawJSON) rawJSON {
	n := 2
	for _, it := range items {
		n += len(it) + 1
	}
	out := make(rawJSON, 0, n)
	out = append(out, '[')
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	return append(out, ']')
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
	res, err := s.charge(w, r, c, op, []string{resource})
	if err != nil {
		return err
	}
	return writeMetered(w, op, res, data, count)
}

// serveRows charges a per-row operation, one resource per row in result order, and writes
// the rows the charge served: paid now or already paid today.
func serveRows[T any](s *Server, w http.ResponseWriter, r *http.Request, c caller, op domain.Operation, resources []string, rows []T) error {
	res, err := s.charge(w, r, c, op, resources)
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
	var data any = served
	if raw, ok := any(served).([]rawJSON); ok {
		data = jsonArray(raw)
	}
	return writeMetered(w, op, res, data, &n)
}

// charge charges the request. Whatever the charge decided is then written in full, however
// long it took: the server's write timeout started when the request was read, and a charge
// that waited on the account's lock past it would be paid with no answer at all. So the
// write deadline starts again once the charge is decided.
//
// It runs on the request's own context, not on the one its reads were bounded by (readWait).
func (s *Server) charge(w http.ResponseWriter, r *http.Request, c caller, op domain.Operation, resources []string) (commands.ChargeResult, error) {
	ctx := r.Context()
	if own, ok := ctx.Value(chargeContextKey{}).(context.Context); ok {
		ctx = own
	}
	res, err := s.Meter.Charge(ctx, commands.ChargeRequest{Caller: c, Operation: op, Resources: resources})
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(httpx.AnswerWriteTimeout)) // not every writer has one
	return res, err
}

// writeMetered is the one place that builds meta and writes a metered success.
func writeMetered(w http.ResponseWriter, op domain.Operation, res commands.ChargeResult, data any, count *int) error {
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
	// {"data":…,"meta":…} as encoding/json writes the struct of the two, with a stored
	// payload spliced in as it is.
	payload, ok := data.(rawJSON)
	if !ok {
		var err error
		if payload, err = json.Marshal(data); err != nil {
			return fmt.Errorf("encode %s payload: %w", op, err)
		}
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("encode meta: %w", err)
	}
	body := make([]byte, 0, len(payload)+len(m)+20)
	body = append(append(body, `{"data":`...), payload...)
	body = append(append(append(body, `,"meta":`...), m...), "}\n"...)
	w.Header().Set("X-Credits-Remaining", strconv.FormatInt(res.Balance, 10))
	httpx.WriteJSONBody(w, http.StatusOK, body)
	return nil
}
