// Package adminapi is the operator HTTP API (docs/api.md, "Admin API"): accounts, keys,
// purchases, bonus grants, the ledger, statements, digests and catalog import, behind one
// bearer token on its own address.
package adminapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/httpx"
)

// Body limits: ordinary calls carry a few fields; a catalog import can be large.
const (
	maxBody       = 1 << 20
	maxImportBody = 64 << 20
)

// Server serves the admin API.
type Server struct {
	Accounts commands.Accounts
	Import   commands.ImportCatalog
	Views    commands.Views
	// LatestDigest returns the newest signed digest of the store as it was saved
	// (domain.ErrNoDigest when there is none); nil serves none.
	LatestDigest func(ctx context.Context) (json.RawMessage, error)
	// Token is ADMIN_TOKEN; when empty every call is refused.
	Token string
	Log   *logrus.Logger
	// Clock decides which grace keys have expired when an account is shown; time.Now when nil.
	Clock func() time.Time
	// Imported, when set, is called after a catalog import has committed and before it is
	// answered: serve waits there until this process's catalog read models (the catalog and
	// its place index) hold the import, so the read API serves it once the 200 is received.
	Imported func(ctx context.Context) error
}

// Handler returns the admin API's routes, wrapped in request id, access log and auth.
func (s *Server) Handler() http.Handler {
	r := mux.NewRouter()
	// Routes match the path as sent, so an outage id holding an escaped "/" (%2F) is one
	// segment; pathVar unescapes what they capture. A path that is not clean ("//", "." or
	// ".." segments) is not redirected, which would answer before the token is checked: it is
	// authenticated, logged and matched as sent, like any other.
	r.UseEncodedPath().SkipClean(true)
	accessLog := httpx.AccessLog(s.logger())
	r.Use(accessLog, s.authenticate)

	small := httpx.LimitBody(maxBody)
	route := func(method, path string, h http.HandlerFunc) {
		r.Handle(path, small(h)).Methods(method)
	}
	route(http.MethodPost, "/admin/accounts", s.openAccount)
	route(http.MethodGet, "/admin/accounts/{accountId}", s.getAccount)
	route(http.MethodPost, "/admin/accounts/{accountId}/keys", s.issueKey)
	route(http.MethodPost, "/admin/accounts/{accountId}/keys/{keyId}/revoke", s.revokeKey)
	route(http.MethodPost, "/admin/accounts/{accountId}/purchases", s.purchase)
	route(http.MethodPut, "/admin/accounts/{accountId}/rate-limit", s.setRateLimit)
	route(http.MethodPost, "/admin/bonus-grants", s.grantBonus)
	route(http.MethodGet, "/admin/bonus-grants/{outageId}", s.bonusGrant)
	route(http.MethodGet, "/admin/accounts/{accountId}/ledger", s.ledger)
	route(http.MethodGet, "/admin/accounts/{accountId}/balance-at", s.balanceAt)
	route(http.MethodGet, "/admin/accounts/{accountId}/statement", s.statement)
	route(http.MethodGet, "/admin/accounts/{accountId}/ledger.csv", s.ledgerCSV)
	route(http.MethodGet, "/admin/digest", s.digest)
	r.Handle("/admin/catalog/import", httpx.LimitBody(maxImportBody)(http.HandlerFunc(s.importCatalog))).Methods(http.MethodPost)

	// Unmatched requests skip the router's middleware: they get the chain here, so that an
	// unauthenticated caller learns nothing about which routes exist.
	r.NotFoundHandler = accessLog(s.authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, http.StatusNotFound, httpx.CodeNotFound, "no such route")
	})))
	r.MethodNotAllowedHandler = accessLog(s.authenticate(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Allow", allowedMethods(r, req))
		httpx.WriteError(w, http.StatusMethodNotAllowed, httpx.CodeBadRequest, "method "+req.Method+" is not allowed on this route")
	})))
	return httpx.AnswerInFull(httpx.RequestID(r))
}

// allowedMethods lists the methods router has a route for at req's path, for a 405's Allow
// header.
func allowedMethods(router *mux.Router, req *http.Request) string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut} {
		probe := *req
		probe.Method = m
		var match mux.RouteMatch
		if router.Match(&probe, &match) && match.MatchErr == nil && match.Route != nil {
			allow = append(allow, m)
		}
	}
	return strings.Join(allow, ", ")
}

// pathVar is the route variable name of r, unescaped. A value that does not unescape is
// returned as sent: it names nothing, so the lookup answers 404. So does one no id can be
// (not UTF-8, or holding a NUL, which PostgreSQL would refuse as text: a 400): it is
// returned as "", which names no account, key or grant.
func pathVar(r *http.Request, name string) string {
	v := mux.Vars(r)[name]
	if u, err := url.PathUnescape(v); err == nil {
		v = u
	}
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return ""
	}
	return v
}

// authenticate requires Authorization: Bearer {ADMIN_TOKEN}, compared in time that tells nothing
// of the token (httpx.SameSecret).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r.Header.Values("Authorization"))
		if !ok {
			e := httpx.MapError(domain.ErrMissingKey)
			e.Message = "missing or malformed Authorization header; send Authorization: Bearer <ADMIN_TOKEN>"
			e.Write(w)
			return
		}
		if !httpx.SameSecret(token, s.Token) {
			e := httpx.MapError(domain.ErrInvalidKey)
			e.Message = "invalid admin token"
			e.Write(w)
			return
		}
		if enc := strings.TrimSpace(r.Header.Get("Content-Encoding")); enc != "" && !strings.EqualFold(enc, "identity") {
			// Read as it came, a gzipped import failed on its first byte as "a NUL character
			// on line 1": say what is wrong instead (docs/api.md, "Catalog import").
			httpx.WriteError(w, http.StatusUnsupportedMediaType, httpx.CodeBadRequest,
				fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed", enc))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearer is the token of a request's one Authorization field. Sent more than once it is
// malformed (RFC 9110, section 5.3: the field is not a list), as it is on the read API.
func bearer(fields []string) (string, bool) {
	if len(fields) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(fields[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func (s *Server) logger() *logrus.Logger {
	if s.Log == nil {
		return logrus.StandardLogger()
	}
	return s.Log
}

func (s *Server) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock()
}

// meta is the event metadata of an admin call.
func meta(r *http.Request) eventstore.Metadata {
	return eventstore.Metadata{RequestID: httpx.RequestIDFrom(r.Context()), Actor: "admin"}
}

// fail maps err to its error body; errors the client cannot fix are logged with their cause.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := httpx.MapError(err)
	if e.Status >= 500 {
		s.logger().WithError(err).WithFields(logrus.Fields{
			"request_id": httpx.RequestIDFrom(r.Context()),
			"status":     e.Status,
		}).Error("admin call failed")
	}
	e.Write(w)
}
