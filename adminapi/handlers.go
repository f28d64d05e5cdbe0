package adminapi

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
)

func (s *Server) openAccount(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name  string `json:"name"`
		Email string `json:"email"`
	}
	if err := decodeBody(r, &body, false); err != nil {
		s.fail(w, r, err)
		return
	}
	id, err := s.Accounts.OpenAccount(r.Context(), body.Name, body.Email, meta(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusCreated, map[string]string{"account_id": id})
}

func (s *Server) getAccount(w http.ResponseWriter, r *http.Request) {
	v, err := s.Views.Account(r.Context(), pathVar(r, "accountId"), s.now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusOK, v)
}

func (s *Server) issueKey(w http.ResponseWriter, r *http.Request) {
	key, err := s.Accounts.IssueKey(r.Context(), pathVar(r, "accountId"), meta(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusCreated, key)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	if err := decodeBody(r, &body, true); err != nil {
		s.fail(w, r, err)
		return
	}
	keyID := pathVar(r, "keyId")
	if err := s.Accounts.RevokeKey(r.Context(), pathVar(r, "accountId"), keyID, body.Reason, meta(r)); err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusOK, map[string]string{"key_id": keyID, "state": string(domain.KeyStateRevoked)})
}

func (s *Server) purchase(w http.ResponseWriter, r *http.Request) {
	var body struct {
		AmountCents json.RawMessage `json:"amount_cents"`
		PaymentRef  string          `json:"payment_ref"`
	}
	if err := decodeBody(r, &body, false); err != nil {
		s.fail(w, r, err)
		return
	}
	cents, err := integer(body.AmountCents, "amount_cents")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.Accounts.Purchase(r.Context(), pathVar(r, "accountId"), cents, body.PaymentRef, meta(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, createdUnlessReplayed(res.Replayed), res)
}

func (s *Server) grantBonus(w http.ResponseWriter, r *http.Request) {
	var body struct {
		OutageID string          `json:"outage_id"`
		Credits  json.RawMessage `json:"credits"`
		Reason   string          `json:"reason"`
	}
	if err := decodeBody(r, &body, false); err != nil {
		s.fail(w, r, err)
		return
	}
	credits, err := integer(body.Credits, "credits")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// A grant runs to its end even if the caller goes away or the write timeout cuts the
	// answer: left half done it would wait for someone to ask again (docs/api.md). A process
	// stopping for good ends it; the next start finishes it.
	ctx, cancel := httpx.Detach(r.Context())
	defer cancel()
	res, err := s.Accounts.GrantBonus(ctx, body.OutageID, credits, body.Reason, meta(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, createdUnlessReplayed(res.Replayed), res)
}

// bonusGrant shows a grant and how far it has got.
func (s *Server) bonusGrant(w http.ResponseWriter, r *http.Request) {
	g, err := s.Accounts.Grant(r.Context(), pathVar(r, "outageId"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusOK, g)
}

// createdUnlessReplayed is 201 for a first call and 200 for an idempotent repeat.
func createdUnlessReplayed(replayed bool) int {
	if replayed {
		return http.StatusOK
	}
	return http.StatusCreated
}

// Ledger paging bounds.
const (
	defaultLedgerLimit = 100
	maxLedgerLimit     = 1000
)

func (s *Server) ledger(w http.ResponseWriter, r *http.Request) {
	q, err := httpx.Query(r, "after", "limit")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	after, err := queryInt(q.Get("after"), "after", 0, 0, math.MaxInt64)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit, err := queryInt(q.Get("limit"), "limit", defaultLedgerLimit, 1, maxLedgerLimit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	lp, err := s.Views.LedgerPage(r.Context(), pathVar(r, "accountId"), after, int(limit))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	entries := lp.Entries
	page := struct {
		Data      []commands.LedgerEntry `json:"data"`
		NextAfter *int64                 `json:"next_after"`
		// Archived says the page was asked to start inside archived history (docs/api.md).
		Archived *commands.ArchivedLedger `json:"archived,omitempty"`
	}{Data: entries, Archived: lp.Archived}
	if len(entries) > 0 {
		page.NextAfter = &entries[len(entries)-1].Position
	}
	httpx.WriteJSON(w, http.StatusOK, page)
}

// queryInt reads an optional integer query parameter in [lo, hi]; out of range is an error,
// never clamped.
func queryInt(raw, name string, def, lo, hi int64) (int64, error) {
	if raw == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, httpx.BadRequest("%s must be an integer between %d and %d", name, lo, hi)
	}
	return n, nil
}

func (s *Server) balanceAt(w http.ResponseWriter, r *http.Request) {
	accountID := pathVar(r, "accountId")
	q, err := httpx.Query(r, "at")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	at, err := parseInstant(q.Get("at"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	balance, err := s.Views.BalanceAt(r.Context(), accountID, at)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusOK, struct {
		AccountID string    `json:"account_id"`
		At        time.Time `json:"at"`
		Balance   int64     `json:"balance"`
	}{AccountID: accountID, At: at.UTC(), Balance: balance})
}

// parseInstant reads an RFC 3339 time. An unencoded "+01:00" offset arrives as " 01:00"
// (a + in a query string is a space), so a space is read back as the plus it was.
func parseInstant(raw string) (time.Time, error) {
	if raw == "" {
		return time.Time{}, httpx.BadRequest("at is required: an RFC 3339 time such as 2025-01-31T12:00:00Z")
	}
	// The answer echoes the instant in UTC, and an RFC 3339 time has a four-digit year: an
	// instant whose UTC year falls outside 0000–9999 (9999-12-31T23:00:00-05:00) could not
	// be written back.
	at, err := domain.ParseInstant(strings.Replace(raw, " ", "+", 1))
	switch {
	case errors.Is(err, domain.ErrInstantOffset):
		return time.Time{}, httpx.BadRequest("at: the offset must be within ±23:59")
	case errors.Is(err, domain.ErrInstantYear):
		return time.Time{}, httpx.BadRequest("at: in UTC the instant must fall in the years 0000 to 9999")
	case err != nil:
		return time.Time{}, httpx.BadRequest("at must be an RFC 3339 time such as 2025-01-31T12:00:00Z")
	}
	return at, nil
}

func (s *Server) importCatalog(w http.ResponseWriter, r *http.Request) {
	body := &bodyReader{r: r.Body}
	res, err := s.Import.Handle(r.Context(), body, meta(r))
	var tooLarge *http.MaxBytesError
	if body.err != nil && !errors.As(body.err, &tooLarge) {
		// The client's upload broke off (a truncated or malformed chunked body): its own
		// fault, nothing imported, and not a database that went away (io.ErrUnexpectedEOF
		// from PostgreSQL's connection is 503).
		err = httpx.BadRequest("cannot read the request body: %v", body.err)
	}
	if err == nil && s.Imported != nil {
		// The import has committed: a failure to see it in the read models (the caller gone,
		// the database lost meanwhile) does not make it less imported.
		if werr := s.Imported(r.Context()); werr != nil {
			s.logger().WithError(werr).WithField("request_id", httpx.RequestIDFrom(r.Context())).
				Warn("catalog import committed; waiting for the read models to hold it failed")
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusOK, res)
}

// bodyReader keeps the first error reading a request body other than its end.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}
