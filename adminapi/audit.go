package adminapi

import (
	"encoding/csv"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
)

// statement sums an account's facts over UTC days [from, to).
func (s *Server) statement(w http.ResponseWriter, r *http.Request) {
	q, err := httpx.Query(r, "from", "to")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	from, err := parseDay(q.Get("from"), "from")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	to, err := parseDay(q.Get("to"), "to")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if from.After(to) {
		s.fail(w, r, httpx.BadRequest("from (%s) must not be after to (%s): to is the first day after the statement", q.Get("from"), q.Get("to")))
		return
	}
	st, err := s.Views.Statement(r.Context(), pathVar(r, "accountId"), from, to)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusOK, st)
}

// parseDay reads a required YYYY-MM-DD query parameter as the start of that UTC day.
func parseDay(raw, name string) (time.Time, error) {
	if raw == "" {
		return time.Time{}, httpx.BadRequest("%s is required: a UTC day such as 2025-01-31", name)
	}
	d, err := time.Parse(time.DateOnly, raw)
	if err != nil || d.Year() < 1 {
		return time.Time{}, httpx.BadRequest("%s must be a day in the form YYYY-MM-DD, such as 2025-01-31", name)
	}
	return d, nil
}

// ledgerPage is how many entries the CSV export reads per transaction.
const ledgerPage = 1000

// ledgerCSV exports the ledger's entries, as the JSON ledger pages them, from after (a
// position, exclusive) to the account's newest fact when the export began. It streams, one
// page at a time; an error after the first row ends the response early rather than cutting
// it silently, so the client sees a broken transfer.
func (s *Server) ledgerCSV(w http.ResponseWriter, r *http.Request) {
	accountID := pathVar(r, "accountId")
	q, err := httpx.Query(r, "after")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	after, err := queryInt(q.Get("after"), "after", 0, 0, math.MaxInt64)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	head, err := s.Views.LedgerHead(r.Context(), accountID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The first page is read before the answer starts, so that an export asked to start
	// inside archived history says so, as the JSON ledger does (docs/api.md).
	first, err := s.Views.LedgerPage(r.Context(), accountID, after, ledgerPage)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if a := first.Archived; a != nil {
		w.Header().Set("Ledger-Archived", fmt.Sprintf("facts=%d; through_position=%d; through_recorded_at=%s; balance_after=%d",
			a.Facts, a.Position, a.RecordedAt.UTC().Format(time.RFC3339Nano), a.BalanceAfter))
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="ledger-`+safeFileName(accountID)+`.csv"`)
	w.WriteHeader(http.StatusOK)
	out := csv.NewWriter(w)
	_ = out.Write([]string{"position", "version", "type", "recorded_at", "credits_delta", "balance_after", "payload"})
	out.Flush() // an export with nothing after `after` is still a CSV: its header row
	rc := http.NewResponseController(w)
	entries := first.Entries
	for done := after >= head; !done; entries = nil {
		// A long export keeps writing: each page gets the write time a whole answer gets.
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if entries == nil {
			page, err := s.Views.LedgerPage(r.Context(), accountID, after, ledgerPage)
			if err == nil && page.Archived != nil {
				// An archive committed during the export took facts it had not written yet.
				err = fmt.Errorf("facts after position %d were archived during the export (through position %d)", after, page.Archived.Position)
			}
			if err != nil {
				s.logger().WithError(err).WithField("request_id", httpx.RequestIDFrom(r.Context())).Error("ledger export failed mid-way")
				abortExport(w, r)
			}
			entries = page.Entries
		}
		for _, e := range entries {
			if e.Position > head {
				done = true
				break
			}
			_ = out.Write([]string{strconv.FormatInt(e.Position, 10), strconv.FormatInt(e.Version, 10), e.Type,
				e.RecordedAt.Format(time.RFC3339Nano), strconv.FormatInt(e.CreditsDelta, 10), strconv.FormatInt(e.BalanceAfter, 10),
				string(e.Payload)})
			after = e.Position
		}
		out.Flush()
		done = done || len(entries) < ledgerPage || after >= head
	}
}

// abortExport ends an export whose answer has begun so that the client sees it broken. Over
// HTTP/1.1 the chunked body then lacks its last chunk. An HTTP/1.0 answer has no chunks: its
// body ends where the connection closes, and the close net/http makes after an abort would
// read as the end of a complete file, so the connection is reset instead.
func abortExport(w http.ResponseWriter, r *http.Request) {
	if !r.ProtoAtLeast(1, 1) {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			if tcp, ok := conn.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0) // Close sends a reset, not the end of the stream
			}
			_ = conn.Close()
		}
	}
	panic(http.ErrAbortHandler)
}

// safeFileName keeps the characters of an account id that need no quoting in a header.
func safeFileName(id string) string {
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// digest serves the newest signed digest of the store (docs/operations.md, "Auditor's guide").
func (s *Server) digest(w http.ResponseWriter, r *http.Request) {
	if s.LatestDigest == nil {
		s.fail(w, r, domain.ErrNoDigest)
		return
	}
	doc, err := s.LatestDigest(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusOK, doc)
}
