package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/projections"
)

// signInForm shows the sign-in form with a fresh sign-in CSRF token, kept in a short cookie.
func (s *Server) signInForm(w http.ResponseWriter, r *http.Request) {
	if s.sessions.find(r, s.now()) != nil {
		http.Redirect(w, r, "/console/accounts", http.StatusSeeOther)
		return
	}
	token := randomToken()
	http.SetCookie(w, cookie(r, signInCookie, token, 15*time.Minute))
	s.render(w, r, nil, result{page: "signin", title: "Sign in", data: token}, nil)
}

// signIn compares the form's token with ADMIN_TOKEN in constant time. A wrong token gets the
// form again with an error; the token is never echoed or logged.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	again := func(status int, msg string) {
		token := randomToken()
		http.SetCookie(w, cookie(r, signInCookie, token, 15*time.Minute))
		s.render(w, r, nil, result{status: status, page: "signin", title: "Sign in", data: token}, errors.New(msg))
	}
	if err := parseForm(r); err != nil {
		again(http.StatusBadRequest, err.Error())
		return
	}
	pre, err := r.Cookie(signInCookie)
	if err != nil || !httpx.SameSecret(pre.Value, r.PostFormValue("csrf")) {
		again(http.StatusForbidden, "The sign-in form had expired. Enter the token again.")
		return
	}
	if s.Token == "" || !httpx.SameSecret(r.PostFormValue("token"), s.Token) {
		s.logger().WithField("request_id", httpx.RequestIDFrom(r.Context())).Warn("console sign-in refused: wrong admin token")
		again(http.StatusUnauthorized, "That is not the admin token.")
		return
	}
	sess := s.sessions.create(s.now(), s.ttl())
	http.SetCookie(w, cookie(r, signInCookie, "", 0))
	http.SetCookie(w, cookie(r, sessionCookie, sess.id, s.ttl()))
	http.Redirect(w, r, "/console/accounts", http.StatusSeeOther)
}

func (s *Server) signOut(r *http.Request, sess *session) (result, error) {
	s.sessions.end(sess)
	return result{redirect: "/console/sign-in"}, nil
}

// searchLimit bounds one page of search results.
const searchLimit = 50

type accountsData struct {
	Query   string
	Results []commands.AccountSummary
	// More is set when more than searchLimit accounts match: the page lists the newest
	// searchLimit and says so.
	More  bool
	Limit int
}

func (s *Server) accountsPage(r *http.Request, _ *session) (result, error) {
	// Strictly, as the account page's ledger cursor: a search url.Values would drop (a ';', a
	// broken %-escape) would list every account as if it matched.
	query, err := httpx.Query(r, "q")
	if err != nil {
		return result{status: http.StatusBadRequest, page: "accounts", title: "Accounts", data: accountsData{}}, errors.New(httpx.MapError(err).Message)
	}
	q := strings.TrimSpace(query.Get("q"))
	res := result{page: "accounts", title: "Accounts", data: accountsData{Query: q}}
	if utf8.RuneCountInString(q) > 200 { // as the field's maxlength counts
		res.status = http.StatusBadRequest
		return res, errors.New("the search is at most 200 characters")
	}
	found, err := s.Views.SearchAccounts(r.Context(), q, s.now(), searchLimit+1)
	more := len(found) > searchLimit
	if more {
		found = found[:searchLimit]
	}
	res.data = accountsData{Query: q, Results: found, More: more, Limit: searchLimit}
	return res, err
}

// ledgerPage is the number of ledger entries on a page.
const ledgerPage = 20

type accountData struct {
	Account   commands.AccountView
	HasActive bool
	ActiveKey string // the key the issue form rotates ("" when none is active)
	// InGrace are the keys in their grace now: rotating the active key revokes them at once
	// (a second rotation during grace, domain.PlanKeyIssue), and the form says so.
	InGrace     []commands.KeyView
	IssueForm   string // the issue form's own token (console/session.go, startIssue)
	Ledger      []commands.LedgerEntry
	Archived    *commands.ArchivedLedger // the facts before the page that are archived, as the admin API's ledger says
	After       int64
	NextAfter   int64
	SpendChart  chart
	BalChart    chart
	ChartFrom   time.Time
	ChartTo     time.Time
	DollarsForm string
	PaymentRef  string
}

func (s *Server) accountPage(r *http.Request, _ *session) (result, error) {
	return s.account(r, "", "")
}

// account renders an account's page; dollars and ref refill the purchase form after an error.
func (s *Server) account(r *http.Request, dollars, ref string) (result, error) {
	ctx := r.Context()
	id := mux.Vars(r)["accountId"]
	res := result{page: "account", title: "Account"}
	// Strictly: a cursor url.Values would drop would show the ledger's first page as page N.
	q, err := httpx.Query(r, "after")
	after := int64(0)
	if err == nil && q.Get("after") != "" {
		after, err = strconv.ParseInt(q.Get("after"), 10, 64)
	}
	if err != nil || after < 0 {
		return result{status: http.StatusBadRequest}, errors.New("after must be a ledger position (a whole number), given once")
	}
	now := s.now()
	acct, err := s.Views.Account(ctx, id, now)
	if err != nil {
		return result{}, err
	}
	d := accountData{Account: acct, After: after, DollarsForm: dollars, PaymentRef: ref, IssueForm: randomToken()}
	res.title = acct.Name
	for _, k := range acct.Keys {
		switch k.State {
		case domain.KeyStateActive:
			d.HasActive, d.ActiveKey = true, k.KeyID
		case domain.KeyStateGrace:
			d.InGrace = append(d.InGrace, k)
		}
	}
	page, err := s.Views.LedgerPage(ctx, id, after, ledgerPage)
	if err != nil {
		return result{}, err
	}
	d.Ledger, d.Archived = page.Entries, page.Archived
	if len(d.Ledger) == ledgerPage {
		d.NextAfter = d.Ledger[len(d.Ledger)-1].Position
	}
	to := now.UTC().Truncate(24 * time.Hour)
	from := to.AddDate(0, 0, -(chartDays - 1))
	spend, balances, opening, err := s.Views.AccountDays(ctx, id, from, to)
	if err != nil {
		return result{}, err
	}
	d.ChartFrom, d.ChartTo = from, to
	d.SpendChart = spendChart(from, spend)
	d.BalChart = balanceChart(from, opening, balances)
	res.data = d
	return res, nil
}

// issueKey issues a key (a rotation when one is active) and sends the operator to the page
// that shows it once. The form carries a token of its own (one per page shown) and the key
// that was active when it was shown (from_key). Sent again by this session (a double click, a
// resent form), it gets the key the first one issued rather than a second rotation, which
// would end the first one's grace at once; and it issues only if from_key is still the
// account's active key (checked under the account's lock), so that a form older than the
// account's keys, or sent by two operators at once, rotates once.
func (s *Server) issueKey(r *http.Request, sess *session) (result, error) {
	id := mux.Vars(r)["accountId"]
	token := r.PostFormValue("form")
	if token == "" {
		return result{status: http.StatusBadRequest}, errors.New("this form has no token of its own: reload the account's page and try again")
	}
	issue, first := s.sessions.startIssue(sess, id+"\x00"+token)
	if !first {
		select {
		case <-issue.done:
		case <-r.Context().Done():
			return result{}, r.Context().Err()
		}
		if issue.err != nil {
			return result{}, issue.err
		}
		return result{redirect: issuedPath(id, issue.keyID)}, nil
	}
	defer close(issue.done)
	// Not cancelled with the request: a browser abandons the first request of a double click,
	// and the second, waiting for this one, must get its key (docs/operations.md).
	ctx, cancel := httpx.Detach(r.Context())
	defer cancel()
	key, err := s.Accounts.IssueKeyReplacing(ctx, id, r.PostFormValue("from_key"), meta(r))
	if errors.Is(err, commands.ErrKeysChanged) {
		err = &domain.ValidationError{Field: "from_key", Message: "the account's keys changed since this page was shown; nothing was issued: check its keys below before you rotate again"}
	}
	if err != nil {
		issue.err = err
		s.sessions.failIssue(sess, id+"\x00"+token)
		return s.accountWithError(r, "", "", err)
	}
	s.sessions.remember(sess, key.KeyID, key.APIKey)
	issue.keyID = key.KeyID
	return result{redirect: issuedPath(id, key.KeyID)}, nil
}

func issuedPath(accountID, keyID string) string {
	return "/console/accounts/" + url.PathEscape(accountID) + "/keys/" + url.PathEscape(keyID) + "/issued"
}

type issuedData struct {
	AccountID string
	KeyID     string
	Key       string
	Shown     bool
}

// issuedKeyPage shows a just-issued key, once: a second visit says it cannot be shown again.
func (s *Server) issuedKeyPage(r *http.Request, sess *session) (result, error) {
	vars := mux.Vars(r)
	key, ok := s.sessions.takeIssued(sess, vars["keyId"])
	d := issuedData{AccountID: vars["accountId"], KeyID: vars["keyId"], Key: key, Shown: ok}
	return result{page: "issued", title: "Key issued", data: d}, nil
}

type revokeData struct {
	Account commands.AccountView
	Key     commands.KeyView
	Reason  string // as typed, when a revoke was refused
}

func (s *Server) revokeConfirm(r *http.Request, _ *session) (result, error) {
	return s.revokePage(r, "")
}

// revokePage asks to confirm the revoke of the key in the path, the reason filled in.
func (s *Server) revokePage(r *http.Request, reason string) (result, error) {
	vars := mux.Vars(r)
	acct, err := s.Views.Account(r.Context(), vars["accountId"], s.now())
	if err != nil {
		return result{}, err
	}
	for _, k := range acct.Keys {
		if k.KeyID == vars["keyId"] {
			return result{page: "revoke", title: "Revoke key", data: revokeData{Account: acct, Key: k, Reason: reason}}, nil
		}
	}
	return result{}, domain.ErrKeyNotFound
}

func (s *Server) revokeKey(r *http.Request, _ *session) (result, error) {
	vars := mux.Vars(r)
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if err := s.Accounts.RevokeKey(r.Context(), vars["accountId"], vars["keyId"], reason, meta(r)); err != nil {
		// A reason refused comes back to the revoke form, as typed; anything else (an unknown
		// key, a failure) is the error page.
		if e := httpx.MapError(err); e.Status == http.StatusBadRequest {
			res, perr := s.revokePage(r, reason)
			if perr != nil {
				return res, perr
			}
			res.status = e.Status
			return res, errors.New(e.Message)
		}
		return result{}, err
	}
	return result{redirect: "/console/accounts/" + url.PathEscape(vars["accountId"])}, nil
}

// dollarsPattern is an amount in dollars with at most two decimals: "25", "25.5", "25.50".
var dollarsPattern = regexp.MustCompile(`^[0-9]{1,9}(\.[0-9]{1,2})?$`)

// parseDollars turns a dollar amount into cents without floating point.
func parseDollars(raw string) (int64, error) {
	raw = strings.TrimPrefix(strings.TrimSpace(raw), "$")
	if !dollarsPattern.MatchString(raw) {
		return 0, &domain.ValidationError{Field: "amount", Message: "must be dollars with at most two decimals, such as 25 or 25.50"}
	}
	whole, frac, _ := strings.Cut(raw, ".")
	for len(frac) < 2 {
		frac += "0"
	}
	w, _ := strconv.ParseInt(whole, 10, 64)
	f, _ := strconv.ParseInt(frac, 10, 64)
	return w*100 + f, nil
}

type purchaseData struct {
	Account    commands.AccountView
	Dollars    string
	Cents      int64
	Credits    int64
	PaymentRef string
}

// purchaseReview shows how many credits the amount buys before anything is recorded.
func (s *Server) purchaseReview(r *http.Request, _ *session) (result, error) {
	// The reference is taken exactly as typed, never trimmed: one the admin API refuses (white
	// space or an invisible character at either end) is refused here too, with the same error,
	// not recorded as another reference.
	dollars, ref := r.PostFormValue("dollars"), r.PostFormValue("payment_ref")
	cents, err := s.purchaseInput(dollars, ref)
	if err == nil {
		err = s.paymentUnused(r, ref)
	}
	if err != nil {
		return s.accountWithError(r, dollars, ref, err)
	}
	acct, err := s.Views.Account(r.Context(), mux.Vars(r)["accountId"], s.now())
	if err != nil {
		return result{}, err
	}
	return result{page: "purchase", title: "Confirm purchase", data: purchaseData{Account: acct, Dollars: formatCents(cents),
		Cents: cents, Credits: domain.CreditsForCents(cents), PaymentRef: ref}}, nil
}

func (s *Server) purchaseInput(dollars, ref string) (int64, error) {
	cents, err := parseDollars(dollars)
	if err != nil {
		return 0, err
	}
	if err := domain.ValidatePurchase(cents); err != nil {
		return 0, err
	}
	if ref == "" {
		return 0, &domain.ValidationError{Field: "payment_ref", Message: "is required: the payment's reference from the payment provider"}
	}
	if err := commands.ValidateReference("payment_ref", ref); err != nil {
		return 0, err
	}
	return cents, nil
}

// paymentUnused refuses a payment reference already recorded: the purchase would be answered
// as its replay and add nothing, and the operator must not be shown a purchase to confirm.
func (s *Server) paymentUnused(r *http.Request, ref string) error {
	p, used, err := s.Views.Payment(r.Context(), ref)
	if err != nil || !used {
		return err
	}
	return &domain.ValidationError{Field: "payment_ref", Message: paymentRecorded(ref, p)}
}

// paymentRecorded says what was recorded under a payment reference.
func paymentRecorded(ref string, p commands.Payment) string {
	return fmt.Sprintf("%q is already recorded: $%s (%s credits) for account %s on %s UTC; nothing more is added under it",
		ref, formatCents(p.AmountCents), groupDigits(p.CreditsAdded), p.AccountID, p.RecordedAt.Format("2006-01-02 15:04"))
}

// accountWithError shows the account page again with the form's input and the error. A
// failure of ours (5xx) goes to render as it is, which logs it and shows only its request id.
func (s *Server) accountWithError(r *http.Request, dollars, ref string, cause error) (result, error) {
	res, err := s.account(r, dollars, ref)
	if err != nil {
		return res, err
	}
	e := httpx.MapError(cause)
	if e.Status >= 500 {
		return res, cause
	}
	res.status = e.Status
	return res, errors.New(e.Message)
}

func (s *Server) purchase(r *http.Request, _ *session) (result, error) {
	id := mux.Vars(r)["accountId"]
	cents, err := strconv.ParseInt(r.PostFormValue("amount_cents"), 10, 64)
	if err != nil {
		return result{status: http.StatusBadRequest}, errors.New("amount_cents must be a whole number of cents")
	}
	ref := r.PostFormValue("payment_ref")
	res, err := s.Accounts.Purchase(r.Context(), id, cents, ref, meta(r))
	if err == nil && res.Replayed {
		// Recorded before (this form sent twice, or the reference used meanwhile): the
		// operator is told, not sent on as if this purchase had added its credits.
		p, _, perr := s.Views.Payment(r.Context(), ref)
		if perr != nil {
			return result{}, perr
		}
		err = &domain.ValidationError{Field: "payment_ref", Message: paymentRecorded(ref, p)}
	}
	if err != nil {
		return s.accountWithError(r, formatCents(cents), ref, err)
	}
	return result{redirect: "/console/accounts/" + url.PathEscape(id)}, nil
}

type bonusData struct {
	Grants   []commands.BonusGrant
	OutageID string
	Credits  int64
	// CreditsForm is the credits field as typed, shown again when the form is refused.
	CreditsForm string
	Reason      string
	Reach       int
	Result      *commands.BonusResult
	// Form is the confirm form's own token (one per review shown), as the key-issue form's.
	Form string
}

// recentGrants is how many grants the bonus page lists.
const recentGrants = 20

func (s *Server) bonusPage(r *http.Request, _ *session) (result, error) {
	grants, err := s.Accounts.RecentGrants(r.Context(), recentGrants)
	return result{page: "bonus", title: "Bonus grants", data: bonusData{Grants: grants}}, err
}

// bonusReview shows how many accounts a grant would reach before it is confirmed.
func (s *Server) bonusReview(r *http.Request, _ *session) (result, error) {
	d, err := bonusInput(r)
	if err == nil {
		switch _, gerr := s.Accounts.Grant(r.Context(), d.OutageID); {
		case gerr == nil:
			err = &domain.ValidationError{Field: "outage_id", Message: "already has a grant (listed below); a grant is made once per outage"}
		case !errors.Is(gerr, domain.ErrGrantNotFound):
			return result{}, gerr // not known to be unused: nothing to confirm
		}
	}
	if err == nil {
		d.Form = randomToken()
		d.Reach, err = s.Accounts.BonusReach(r.Context(), s.now())
		return result{page: "bonus-review", title: "Confirm bonus grant", data: d}, err
	}
	grants, gerr := s.Accounts.RecentGrants(r.Context(), recentGrants)
	if gerr != nil {
		return result{}, gerr
	}
	d.Grants = grants
	return result{status: http.StatusBadRequest, page: "bonus", title: "Bonus grants", data: d}, errors.New(httpx.MapError(err).Message)
}

func bonusInput(r *http.Request) (bonusData, error) {
	// The outage id is taken exactly as typed, like a payment reference (purchaseReview).
	d := bonusData{OutageID: r.PostFormValue("outage_id"), Reason: strings.TrimSpace(r.PostFormValue("reason")),
		CreditsForm: strings.TrimSpace(r.PostFormValue("credits"))}
	credits, err := strconv.ParseInt(d.CreditsForm, 10, 64)
	if err != nil || credits <= 0 || credits > commands.MaxBonusCredits {
		return d, &domain.ValidationError{Field: "credits", Message: fmt.Sprintf("must be a whole number between 1 and %d", commands.MaxBonusCredits)}
	}
	d.Credits = credits
	if d.OutageID == "" {
		return d, &domain.ValidationError{Field: "outage_id", Message: "is required: name the outage, such as 2026-03-01-db"}
	}
	if err := commands.ValidateReference("outage_id", d.OutageID); err != nil {
		return d, err
	}
	return d, commands.ValidateReason(d.Reason)
}

func (s *Server) grantBonus(r *http.Request, sess *session) (result, error) {
	d, err := bonusInput(r)
	var res commands.BonusResult
	if err == nil {
		res, err = s.grantOnce(r, sess, d)
	}
	if err != nil && httpx.MapError(err).Status >= 500 {
		return result{}, err
	}
	var gerr error
	if d.Grants, gerr = s.Accounts.RecentGrants(r.Context(), recentGrants); gerr != nil {
		return result{}, gerr
	}
	if err != nil {
		return result{status: httpx.MapError(err).Status, page: "bonus", title: "Bonus grants", data: d}, errors.New(httpx.MapError(err).Message)
	}
	d.Result = &res
	return result{page: "bonus", title: "Bonus grants", data: d}, nil
}

// grantOnce makes the grant a confirm form asks for. The form carries a token of its own (one
// per review shown): sent again by this session (a double click, a resent form), it gets the
// grant the first one made, as the key-issue form does (issueKey), not "this form granted
// nothing" for a grant it did make.
func (s *Server) grantOnce(r *http.Request, sess *session, d bonusData) (commands.BonusResult, error) {
	token := r.PostFormValue("form")
	if token == "" {
		return commands.BonusResult{}, &domain.ValidationError{Field: "form", Message: "this form has no token of its own: review the grant again"}
	}
	form := "bonus\x00" + d.OutageID + "\x00" + token
	grant, first := s.sessions.startIssue(sess, form)
	if !first {
		select {
		case <-grant.done:
		case <-r.Context().Done():
			return commands.BonusResult{}, r.Context().Err()
		}
		return grant.grant, grant.err
	}
	defer close(grant.done)
	ctx, cancel := httpx.Detach(r.Context())
	defer cancel()
	res, err := s.Accounts.GrantBonus(ctx, d.OutageID, d.Credits, d.Reason, meta(r))
	if err == nil && !res.First {
		// Granted before (the outage granted meanwhile, still running or done, by another form
		// or the admin API): this form added nothing of its own, and the operator is told so,
		// not shown the earlier grant as theirs.
		err = &domain.ValidationError{Field: "outage_id", Message: fmt.Sprintf(
			"already has a grant (%s credits to %d accounts, listed below); this form granted nothing", groupDigits(res.Credits), res.Accounts)}
	}
	if err != nil {
		grant.err = err
		s.sessions.failIssue(sess, form)
		return commands.BonusResult{}, err
	}
	grant.grant = res
	return res, nil
}

type importData struct {
	File   string
	Result *commands.ImportResult
	Line   int
	Field  string
}

func (s *Server) importPage(r *http.Request, _ *session) (result, error) {
	return result{page: "import", title: "Catalog import", data: importData{}}, nil
}

// importCatalog imports the uploaded NDJSON file through the same command as the admin API:
// all of it or, at the first bad line, nothing.
func (s *Server) importCatalog(r *http.Request, _ *session) (result, error) {
	res := result{page: "import", title: "Catalog import"}
	f, hdr, err := r.FormFile("file")
	if err != nil {
		res.status = http.StatusBadRequest
		res.data = importData{}
		return res, errors.New("choose an NDJSON file to import")
	}
	defer f.Close()
	d := importData{File: hdr.Filename}
	out, err := s.Import.Handle(r.Context(), f, meta(r))
	if err != nil {
		var lineErr *domain.ImportError
		if errors.As(err, &lineErr) {
			d.Line, d.Field = lineErr.Line, lineErr.Field
		}
		res.data = d
		e := httpx.MapError(err)
		if e.Status < 500 {
			res.status = e.Status
			return res, fmt.Errorf("nothing was imported: %s", e.Message)
		}
		return res, err
	}
	if s.Imported != nil {
		// Committed: a failure to see it in the read models does not make it less imported.
		if werr := s.Imported(r.Context()); werr != nil {
			s.logger().WithError(werr).WithField("request_id", httpx.RequestIDFrom(r.Context())).
				Warn("catalog import committed; waiting for the read models to hold it failed")
		}
	}
	d.Result = &out
	res.data = d
	return res, nil
}

type systemData struct {
	Version      string
	StartedAt    time.Time
	Uptime       time.Duration
	DBReachable  bool
	DBError      string
	Head         eventstore.Position
	TotalEvents  int64
	Projections  []projections.Status
	MaxLag       int64
	PoolAcquired int32
	PoolTotal    int32
	PoolMax      int32
}

// dbProbeTimeout bounds the System page's database checks.
const dbProbeTimeout = 3 * time.Second

func (s *Server) systemPage(r *http.Request, _ *session) (result, error) {
	d := systemData{Version: s.Version, StartedAt: s.StartedAt.UTC(), Uptime: s.now().Sub(s.StartedAt).Truncate(time.Second),
		MaxLag: projections.MaxLagCounted}
	ctx, cancel := context.WithTimeout(r.Context(), dbProbeTimeout)
	defer cancel()
	st := s.Pool.Stat()
	d.PoolAcquired, d.PoolTotal, d.PoolMax = st.AcquiredConns(), st.TotalConns(), st.MaxConns()
	err := s.Pool.Ping(ctx)
	if err == nil {
		d.Head, err = eventstore.GlobalHead(ctx, s.Pool)
	}
	if err == nil {
		d.TotalEvents, err = eventstore.TotalEvents(ctx, s.Pool)
	}
	if err == nil {
		d.DBReachable = true
		d.Projections = projections.Statuses(ctx, s.Pool, s.Projections)
	} else {
		// The page still answers: an unreachable database is what it is there to show.
		s.logger().WithError(err).WithFields(logrus.Fields{"request_id": httpx.RequestIDFrom(r.Context())}).Warn("console: database check failed")
		d.DBError = "the database did not answer within " + dbProbeTimeout.String()
	}
	return result{page: "system", title: "System", data: d}, nil
}

// formatCents writes cents as dollars: 2550 → "25.50".
func formatCents(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }
