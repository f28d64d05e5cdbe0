package adminapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/kyapi/kyapi/internal/httpx"
)

// setRateLimit sets an account's request cap per key and minute:
// {"requests_per_minute": N} (1..100000) or {"requests_per_minute": null} for the default.
func (s *Server) setRateLimit(w http.ResponseWriter, r *http.Request) {
	var body struct {
		RequestsPerMinute json.RawMessage `json:"requests_per_minute"`
	}
	if err := decodeBody(r, &body, false); err != nil {
		s.fail(w, r, err)
		return
	}
	var perMinute *int64
	switch raw := string(body.RequestsPerMinute); raw {
	case "":
		s.fail(w, r, httpx.BadRequest("requests_per_minute: is required (an integer from 1 to 100000, or null for the default)"))
		return
	case "null":
	default:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			s.fail(w, r, httpx.BadRequest("requests_per_minute: must be a JSON integer from 1 to 100000, or null for the default"))
			return
		}
		perMinute = &n
	}
	accountID := pathVar(r, "accountId")
	if err := s.Accounts.SetRateLimit(r.Context(), accountID, perMinute, meta(r)); err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusOK, struct {
		AccountID          string `json:"account_id"`
		RateLimitPerMinute *int64 `json:"rate_limit_per_minute"`
	}{accountID, perMinute})
}
