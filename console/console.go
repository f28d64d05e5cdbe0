// Package console is the operators' console in the browser, served at /console/ on the admin
// listener (docs/operations.md, "Console and metrics"). It signs in with the admin token,
// keeps a server-side session behind an HttpOnly, SameSite=Strict cookie, and checks a CSRF
// token on every form that changes anything. Every action calls the same commands as the
// admin API; the pages are server-rendered HTML with embedded CSS, the charts server-side SVG.
package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/projections"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// DefaultSessionTTL is how long a sign-in lasts.
const DefaultSessionTTL = 8 * time.Hour

// Body limits: forms carry a few fields; a catalog import can be large (as on the admin API).
const (
	maxForm   = 1 << 20
	maxImport = 64 << 20
)

// Server serves the console.
type Server struct {
	Accounts commands.Accounts
	Import   commands.ImportCatalog
	Views    commands.Views
	Pool     *pgxpool.Pool
	// Projections are the ones the System page reports on.
	Projections []projections.Projection
	// Token is ADMIN_TOKEN; when empty nobody can sign in.
	Token     string
	Log       *logrus.Logger
	Clock     func() time.Time // time.Now when nil
	Version   string
	StartedAt time.Time
	// Imported, when set, is called after a catalog import has committed and before the page
	// answers, as the admin API's (adminapi.Server.Imported): the read API serves the import
	// once the operator sees it reported.
	Imported func(ctx context.Context) error
	// SessionTTL is how long a sign-in lasts; DefaultSessionTTL when zero.
	SessionTTL time.Duration

	sessions *sessions
	pages    map[string]*template.Template
}

// result is what a page handler answers: a page to render with its data, or a redirect.
type result struct {
	status   int
	page     string
	title    string
	data     any
	redirect string
}

type pageHandler func(r *http.Request, sess *session) (result, error)

// Handler returns the console's routes, all under /console/.
func (s *Server) Handler() http.Handler {
	s.sessions = newSessions()
	s.pages = parsePages()
	// A path that is not clean once unescaped (%2E%2E segments; the admin listener sends the
	// others to the admin API) is not redirected, which would answer before the access log and
	// the security headers: it is matched as it is, and is the 404 page.
	r := mux.NewRouter().SkipClean(true)
	r.Use(httpx.AccessLog(s.logger()), securityHeaders)

	static, _ := fs.Sub(staticFS, "static")
	r.PathPrefix("/console/static/").Handler(http.StripPrefix("/console/static/", http.FileServer(http.FS(static)))).Methods(http.MethodGet)
	r.HandleFunc("/console/sign-in", s.signInForm).Methods(http.MethodGet)
	r.HandleFunc("/console/sign-in", s.signIn).Methods(http.MethodPost)

	get := func(path string, h pageHandler) { r.Handle(path, s.signedIn(h, false, 0)).Methods(http.MethodGet) }
	post := func(path string, h pageHandler, limit int64) {
		r.Handle(path, s.signedIn(h, true, limit)).Methods(http.MethodPost)
	}
	r.Handle("/console/", http.RedirectHandler("/console/accounts", http.StatusSeeOther)).Methods(http.MethodGet)
	post("/console/sign-out", s.signOut, maxForm)
	get("/console/accounts", s.accountsPage)
	get("/console/accounts/{accountId}", s.accountPage)
	post("/console/accounts/{accountId}/keys", s.issueKey, maxForm)
	get("/console/accounts/{accountId}/keys/{keyId}/issued", s.issuedKeyPage)
	get("/console/accounts/{accountId}/keys/{keyId}/revoke", s.revokeConfirm)
	post("/console/accounts/{accountId}/keys/{keyId}/revoke", s.revokeKey, maxForm)
	post("/console/accounts/{accountId}/purchases/review", s.purchaseReview, maxForm)
	post("/console/accounts/{accountId}/purchases", s.purchase, maxForm)
	get("/console/bonus-grants", s.bonusPage)
	post("/console/bonus-grants/review", s.bonusReview, maxForm)
	post("/console/bonus-grants", s.grantBonus, maxForm)
	get("/console/catalog-import", s.importPage)
	post("/console/catalog-import", s.importCatalog, maxImport)
	get("/console/system", s.systemPage)

	notFound := func(w http.ResponseWriter, r *http.Request) {
		s.render(w, r, nil, result{status: http.StatusNotFound, page: "error", title: "Not found"}, errors.New("no such page"))
	}
	r.NotFoundHandler = httpx.AccessLog(s.logger())(securityHeaders(http.HandlerFunc(notFound)))
	r.MethodNotAllowedHandler = httpx.AccessLog(s.logger())(securityHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.render(w, r, nil, result{status: http.StatusMethodNotAllowed, page: "error", title: "Not allowed"},
			errors.New("method "+r.Method+" is not allowed here"))
	})))
	return httpx.AnswerInFull(httpx.RequestID(r))
}

// securityHeaders keep the console out of frames and caches, and allow only its own script
// and styles.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// signedIn runs h for a signed-in operator; a state-changing request must also carry the
// session's CSRF token in the form field "csrf", or it is refused with 403 and does nothing.
func (s *Server) signedIn(h pageHandler, changes bool, limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess := s.sessions.find(r, s.now())
		if sess == nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/console/sign-in", http.StatusSeeOther)
				return
			}
			s.render(w, r, nil, result{status: http.StatusUnauthorized, page: "error", title: "Signed out"},
				errors.New("your session has ended; sign in again"))
			return
		}
		if changes {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
			if err := parseForm(r); err != nil {
				s.render(w, r, sess, result{status: http.StatusBadRequest, page: "error", title: "Bad form"}, err)
				return
			}
			if !httpx.SameSecret(r.PostFormValue("csrf"), sess.csrf) {
				dropUploads(r)
				s.logger().WithField("request_id", httpx.RequestIDFrom(r.Context())).Warn("console form refused: missing or wrong CSRF token")
				s.render(w, r, sess, result{status: http.StatusForbidden, page: "error", title: "Refused"},
					errors.New("this form is missing its security token (CSRF) or it has expired; reload the page and try again"))
				return
			}
		}
		res, err := h(r, sess)
		dropUploads(r)
		if err == nil && res.redirect != "" {
			http.Redirect(w, r, res.redirect, http.StatusSeeOther)
			return
		}
		s.render(w, r, sess, res, err)
	})
}

// dropUploads removes the parts of a multipart form spooled to disk (over 8 MiB of an upload),
// before the answer is written. net/http removes them only through the request it made, and
// the handler holds a copy of it (the middleware's contexts): left to it, every large import
// would stay in the temporary directory.
func dropUploads(r *http.Request) {
	if r.MultipartForm != nil {
		_ = r.MultipartForm.RemoveAll()
	}
}

// parseForm reads a URL-encoded or multipart form; a body over the limit is a clear error.
func parseForm(r *http.Request) error {
	var err error
	if ct := r.Header.Get("Content-Type"); len(ct) >= 19 && ct[:19] == "multipart/form-data" {
		err = r.ParseMultipartForm(8 << 20)
	} else {
		err = r.ParseForm()
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return errors.New("the form is too large")
	}
	if err != nil {
		return errors.New("the form could not be read")
	}
	return nil
}

// view is what every page template receives.
type view struct {
	Title    string
	CSRF     string
	SignedIn bool
	Error    string
	Data     any
}

// render writes a page. An error is shown on the page (with its status from the one error
// mapper); an error the operator cannot fix is logged and shown only as its request id.
func (s *Server) render(w http.ResponseWriter, r *http.Request, sess *session, res result, err error) {
	v := view{Title: res.title, Data: res.data}
	if sess != nil {
		v.CSRF, v.SignedIn = sess.csrf, true
	}
	status := res.status
	if status == 0 {
		status = http.StatusOK
	}
	if err != nil {
		v.Error = err.Error()
		if status == http.StatusOK {
			e := httpx.MapError(err)
			status = e.Status
			v.Error = e.Message
			if e.Status >= 500 {
				reqID := httpx.RequestIDFrom(r.Context())
				s.logger().WithError(err).WithFields(logrus.Fields{"request_id": reqID, "status": e.Status}).Error("console page failed")
				v.Error = "Something went wrong on our side (request id " + reqID + "). Nothing you did caused it; try again or check the logs."
			}
		}
		if res.page == "" {
			res.page = "error"
		}
		if v.Title == "" {
			v.Title = "Error"
		}
	}
	t := s.pages[res.page]
	if t == nil {
		t = s.pages["error"]
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		s.logger().WithError(err).WithField("page", res.page).Error("console template failed")
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
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

func (s *Server) ttl() time.Duration {
	if s.SessionTTL <= 0 {
		return DefaultSessionTTL
	}
	return s.SessionTTL
}

// meta is the event metadata of a console action: the actor names the console.
func meta(r *http.Request) eventstore.Metadata {
	return eventstore.Metadata{RequestID: httpx.RequestIDFrom(r.Context()), Actor: "admin:console"}
}
