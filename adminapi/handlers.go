package adminapi

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

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

// accountView is an account as an operator sees it. Balance and keys come from the write
// model, so they are current the moment an admin call returns.
type accountView struct {
	AccountID string        `json:"account_id"`
	Name      string        `json:"name"`
	Email     string        `json:"email"`
	Balance   int64         `json:"balance"`
	OpenedAt  time.Time     `json:"opened_at"`
	Keys      []keyView     `json:"keys"`
	Totals    accountTotals `json:"totals"`
}

// keyView never holds the key itself: only its prefix and last 4 characters.
type keyView struct {
	KeyID      string          `json:"key_id"`
	Prefix     string          `json:"prefix"`
	Last4      string          `json:"last4"`
	State      domain.KeyState `json:"state"`
	GraceUntil *time.Time      `json:"grace_until"`
	IssuedAt   time.Time       `json:"issued_at"`
}

type accountTotals struct {
	PurchasedCredits     int64 `json:"purchased_credits"`
	BonusCredits         int64 `json:"bonus_credits"`
	ChargedCredits       int64 `json:"charged_credits"`
	RequestsCharged      int64 `json:"requests_charged"`
	RequestsDeduplicated int64 `json:"requests_deduplicated"`
}

func (s *Server) getAccount(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := accountView{AccountID: mux.Vars(r)["accountId"], Keys: []keyView{}}
	now := s.now()
	// One snapshot, so that balance, keys and totals describe the same moment.
	err := pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT name, email, balance, opened_at FROM accounts WHERE account_id = $1`, v.AccountID).
			Scan(&v.Name, &v.Email, &v.Balance, &v.OpenedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.ErrAccountNotFound
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT key_id, last4, state, issued_at, grace_until FROM api_keys
			WHERE account_id = $1 ORDER BY issued_at, key_id`, v.AccountID)
		if err != nil {
			return err
		}
		var k domain.Key
		_, err = pgx.ForEachRow(rows, []any{&k.ID, &k.Last4, &k.State, &k.IssuedAt, &k.GraceUntil}, func() error {
			v.Keys = append(v.Keys, keyView{KeyID: k.ID, Prefix: domain.KeyPrefix, Last4: k.Last4,
				State: k.StateAt(now), GraceUntil: k.GraceUntil, IssuedAt: k.IssuedAt.UTC()})
			return nil
		})
		if err != nil {
			return err
		}
		t := &v.Totals
		return tx.QueryRow(ctx, `
			WITH e AS (
				SELECT type, coalesce((payload->>'credits_delta')::bigint, 0) AS delta
				FROM events WHERE stream_id = $1)
			SELECT coalesce(sum(delta) FILTER (WHERE type = $2), 0),
			       coalesce(sum(delta) FILTER (WHERE type = $3), 0),
			       coalesce(-sum(delta) FILTER (WHERE type IN ($4, $5)), 0),
			       count(*) FILTER (WHERE type = $4),
			       count(*) FILTER (WHERE type = $5)
			FROM e`,
			domain.AccountStream(v.AccountID), domain.EventCreditsPurchased, domain.EventBonusGranted,
			domain.EventRequestCharged, domain.EventRequestDeduplicated).
			Scan(&t.PurchasedCredits, &t.BonusCredits, &t.ChargedCredits, &t.RequestsCharged, &t.RequestsDeduplicated)
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v.OpenedAt = v.OpenedAt.UTC()
	httpx.WriteData(w, http.StatusOK, v)
}

func (s *Server) issueKey(w http.ResponseWriter, r *http.Request) {
	key, err := s.Accounts.IssueKey(r.Context(), mux.Vars(r)["accountId"], meta(r))
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
	vars := mux.Vars(r)
	if err := s.Accounts.RevokeKey(r.Context(), vars["accountId"], vars["keyId"], body.Reason, meta(r)); err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusOK, map[string]string{"key_id": vars["keyId"], "state": string(domain.KeyStateRevoked)})
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
	res, err := s.Accounts.Purchase(r.Context(), mux.Vars(r)["accountId"], cents, body.PaymentRef, meta(r))
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
	res, err := s.Accounts.GrantBonus(r.Context(), body.OutageID, credits, body.Reason, meta(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, createdUnlessReplayed(res.Replayed), res)
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

// ledgerRow is one account fact as the rm_ledger projection holds it.
type ledgerRow struct {
	Position     int64           `json:"position"`
	Version      int64           `json:"version"`
	Type         string          `json:"type"`
	RecordedAt   time.Time       `json:"recorded_at"`
	CreditsDelta int64           `json:"credits_delta"`
	BalanceAfter int64           `json:"balance_after"`
	Payload      json.RawMessage `json:"payload"`
}

func (s *Server) ledger(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	accountID := mux.Vars(r)["accountId"]
	q := r.URL.Query()
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
	if err := s.accountExists(r, accountID); err != nil {
		s.fail(w, r, err)
		return
	}
	if s.WaitProjected != nil {
		if err := s.WaitProjected(ctx); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	// The key hash is no secret but it is no business of an auditor either: only prefix
	// and last4 are ever shown of a key.
	rows, err := s.Pool.Query(ctx, `SELECT position, version, type, recorded_at, credits_delta, balance_after, payload - 'key_hash'
		FROM rm_ledger WHERE account_id = $1 AND position > $2 ORDER BY position LIMIT $3`, accountID, after, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []ledgerRow{}
	var row ledgerRow
	_, err = pgx.ForEachRow(rows, []any{&row.Position, &row.Version, &row.Type, &row.RecordedAt, &row.CreditsDelta, &row.BalanceAfter, &row.Payload}, func() error {
		row.RecordedAt = row.RecordedAt.UTC()
		row.Payload = append(json.RawMessage(nil), row.Payload...)
		out = append(out, row)
		return nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	page := struct {
		Data      []ledgerRow `json:"data"`
		NextAfter *int64      `json:"next_after"`
	}{Data: out}
	if len(out) > 0 {
		page.NextAfter = &out[len(out)-1].Position
	}
	httpx.WriteJSON(w, http.StatusOK, page)
}

func (s *Server) accountExists(r *http.Request, accountID string) error {
	var one int
	err := s.Pool.QueryRow(r.Context(), `SELECT 1 FROM accounts WHERE account_id = $1`, accountID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.ErrAccountNotFound
	}
	return err
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
	accountID := mux.Vars(r)["accountId"]
	at, err := parseInstant(r.URL.Query().Get("at"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Read from the events themselves, not a projection: every account event carries the
	// balance after it, so the answer is exact whatever the projections' lag.
	var balance *int64
	err = s.Pool.QueryRow(r.Context(), `SELECT (
			SELECT (payload->>'balance_after')::bigint FROM events
			WHERE stream_id = $2 AND recorded_at <= $3 ORDER BY version DESC LIMIT 1)
		FROM accounts WHERE account_id = $1`, accountID, domain.AccountStream(accountID), at).Scan(&balance)
	if errors.Is(err, pgx.ErrNoRows) {
		err = domain.ErrAccountNotFound
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		AccountID string    `json:"account_id"`
		At        time.Time `json:"at"`
		Balance   int64     `json:"balance"`
	}{AccountID: accountID, At: at.UTC()}
	if balance != nil {
		out.Balance = *balance
	}
	httpx.WriteData(w, http.StatusOK, out)
}

// parseInstant reads an RFC 3339 time. An unencoded "+01:00" offset arrives as " 01:00"
// (a + in a query string is a space), so a space is read back as the plus it was.
func parseInstant(raw string) (time.Time, error) {
	if raw == "" {
		return time.Time{}, httpx.BadRequest("at is required: an RFC 3339 time such as 2025-01-31T12:00:00Z")
	}
	at, err := time.Parse(time.RFC3339Nano, strings.Replace(raw, " ", "+", 1))
	if err != nil {
		return time.Time{}, httpx.BadRequest("at must be an RFC 3339 time such as 2025-01-31T12:00:00Z")
	}
	return at, nil
}

func (s *Server) importCatalog(w http.ResponseWriter, r *http.Request) {
	res, err := s.Import.Handle(r.Context(), r.Body, meta(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpx.WriteData(w, http.StatusOK, res)
}
