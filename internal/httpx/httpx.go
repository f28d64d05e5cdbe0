// Package httpx holds what the public read API and the admin API share at the HTTP edge:
// the JSON envelope and error body, the one mapping from errors to status and code, and the
// request-id, access-log and body-limit middleware.
package httpx

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// WriteJSON writes v as the JSON body with the given status. v is encoded before anything
// is sent: a value that cannot be encoded is answered 500 with an error body, never the
// status meant for it with an empty body.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		buf.Reset()
		status = http.StatusInternalServerError
		_ = json.NewEncoder(&buf).Encode(errorBody{Error: "internal error", Code: CodeInternal})
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// WriteJSONBody writes body, JSON already encoded, with the given status.
func WriteJSONBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// WriteData writes the success envelope {"data": ...}.
func WriteData(w http.ResponseWriter, status int, data any) {
	WriteJSON(w, status, struct {
		Data any `json:"data"`
	}{data})
}

// WriteError writes the error body {"error": message, "code": code}.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	WriteJSON(w, status, errorBody{Error: message, Code: code})
}

type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Error is an error as the client sees it: status, machine code and human sentence, and for a
// 503 what became of the request's charge.
type Error struct {
	Status  int
	Code    string
	Message string
	// Outcome, on a 503, is the X-Charge-Outcome header: OutcomeNone or OutcomeUnknown.
	Outcome string
}

// Write writes e as the error body. A 503 also says when to retry (Retry-After, seconds) and,
// in X-Charge-Outcome, whether the request may have been charged: the code of every 5xx is
// `internal`, the one decisions.md lists (docs/api.md, "Errors").
func (e Error) Write(w http.ResponseWriter) {
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", challenge(e.Code))
	}
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
		if e.Outcome != "" {
			w.Header().Set(ChargeOutcomeHeader, e.Outcome)
		}
	}
	WriteError(w, e.Status, e.Code, e.Message)
}

// challenge is the WWW-Authenticate field every 401 must carry (RFC 9110, section 11.6.1):
// the Bearer scheme (RFC 6750, section 3), with error="invalid_token" when a token was sent
// but is not one the server accepts, and no error when none was sent (docs/api.md, "Errors").
func challenge(code string) string {
	if code == CodeInvalidAPIKey {
		return `Bearer realm="kyapi", error="invalid_token"`
	}
	return `Bearer realm="kyapi"`
}

// BadRequestError is a problem with the request itself (malformed JSON, a bad query
// parameter) found at the edge before any command runs.
type BadRequestError struct{ Message string }

func (e *BadRequestError) Error() string { return e.Message }

// BadRequest returns a *BadRequestError with a formatted message.
func BadRequest(format string, args ...any) error {
	return &BadRequestError{Message: fmt.Sprintf(format, args...)}
}

// Error codes of the error body (docs/api.md, "Errors").
const (
	CodeBadRequest          = "bad_request"
	CodeMissingAPIKey       = "missing_api_key"
	CodeInvalidAPIKey       = "invalid_api_key"
	CodeRevokedAPIKey       = "revoked_api_key"
	CodeInsufficientCredits = "insufficient_credits"
	CodeNotFound            = "not_found"
	CodeRateLimited         = "rate_limited"
	CodeInternal            = "internal"
	// CodeArchived is a 410 for an admin read whose answer lies in archived history
	// (domain.ArchivedError; docs/api.md).
	CodeArchived = "archived"
)

// ChargeOutcomeHeader is the header of a 503 that says what became of the request's charge.
const ChargeOutcomeHeader = "X-Charge-Outcome"

// The values of ChargeOutcomeHeader.
const (
	// OutcomeNone: the database is unreachable or too slow, or the charge's transaction is
	// known to have been rolled back: nothing was charged.
	OutcomeNone = "none"
	// OutcomeUnknown: the connection was lost after the charge's (or an admin write's) COMMIT was
	// sent and it could not be found out whether it committed (domain.ErrOutcomeUnknown,
	// eventstore.ErrCommitOutcomeUnknown; docs/api.md).
	OutcomeUnknown = "unknown"
)

// MapError is the one place that turns an error into a status, code and message. Anything
// it does not know is a 500 whose message reveals nothing.
func MapError(err error) Error {
	sentinels := []struct {
		err     error
		status  int
		code    string
		outcome string
	}{
		{domain.ErrMissingKey, http.StatusUnauthorized, CodeMissingAPIKey, ""},
		{domain.ErrInvalidKey, http.StatusUnauthorized, CodeInvalidAPIKey, ""},
		{domain.ErrKeyRevoked, http.StatusForbidden, CodeRevokedAPIKey, ""},
		{domain.ErrInsufficientCredits, http.StatusPaymentRequired, CodeInsufficientCredits, ""},
		{domain.ErrAccountNotFound, http.StatusNotFound, CodeNotFound, ""},
		{domain.ErrKeyNotFound, http.StatusNotFound, CodeNotFound, ""},
		{domain.ErrGrantNotFound, http.StatusNotFound, CodeNotFound, ""},
		{domain.ErrNoDigest, http.StatusNotFound, CodeNotFound, ""},
		{domain.ErrPurchaseAmount, http.StatusBadRequest, CodeBadRequest, ""},
		// §6 has no conflict code: a payment reference reused for another account is a bad request.
		{domain.ErrPaymentRefReused, http.StatusBadRequest, CodeBadRequest, ""},
		{domain.ErrOutcomeUnknown, http.StatusServiceUnavailable, CodeInternal, OutcomeUnknown},
		{eventstore.ErrCommitOutcomeUnknown, http.StatusServiceUnavailable, CodeInternal, OutcomeUnknown},
		{domain.ErrUnavailable, http.StatusServiceUnavailable, CodeInternal, OutcomeNone},
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return Error{Status: s.status, Code: s.code, Message: s.err.Error(), Outcome: s.outcome}
		}
	}
	var (
		validation *domain.ValidationError
		archived   *domain.ArchivedError
		importErr  *domain.ImportError
		badRequest *BadRequestError
		tooLarge   *http.MaxBytesError
	)
	switch {
	case errors.As(err, &validation):
		return Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: validation.Error()}
	case errors.As(err, &archived):
		return Error{Status: http.StatusGone, Code: CodeArchived, Message: archived.Error()}
	case errors.As(err, &importErr):
		return Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: importErr.Error()}
	case errors.As(err, &badRequest):
		return Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: badRequest.Message}
	case errors.As(err, &tooLarge):
		return Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBadRequest,
			Message: fmt.Sprintf("request body is larger than %d bytes", tooLarge.Limit)}
	case isDataException(err):
		return Error{Status: http.StatusBadRequest, Code: CodeBadRequest,
			Message: "input the database cannot store (for example a NUL character or an out-of-range value)"}
	case isUnavailable(err):
		return Error{Status: http.StatusServiceUnavailable, Code: CodeInternal, Message: "service temporarily unavailable", Outcome: OutcomeNone}
	}
	return Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
}

// isDataException reports PostgreSQL's class 22 (data exception): the input itself could not
// be stored or compared, such as a NUL character in text. It is the client's input, not a bug.
func isDataException(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22")
}

// isUnavailable tells a database that cannot answer now (down, restarting, overloaded, too
// slow for the request's deadline) from a bug.
func isUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || pgconn.Timeout(err) {
		return true
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) {
		return true
	}
	// A connection the server dropped without a word (an immediate shutdown, a crash, a
	// failover) ends its read with EOF. (A request body that breaks off is the client's, and
	// its handler says so first: adminapi's catalog import.)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	// A pooled connection the server had already dropped (terminated, restarted): pgx finds it
	// closed before it sends anything, at times while it clears the statements it cached
	// ("failed to deallocate cached statement(s): conn closed"). Nothing reached the server.
	if errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; class 53: insufficient resources (53100 disk full,
		// 53200 out of memory, 53300 too many connections); 57P01..57P03: the server is
		// shutting down or starting up; 57014: a statement cancelled (statement_timeout: too
		// slow); 55P03: lock_timeout; 25006: the database is read-only (a standby it failed
		// over to). Each rolls its transaction back.
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "57014", "55P03", "25006":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53")
	}
	return false
}

type requestIDKey struct{}

// RequestIDHeader carries the request id both ways.
const RequestIDHeader = "X-Request-Id"

// RequestID gives every request a fresh id (16 random bytes in hex), echoed in the response's
// X-Request-Id and available to handlers through RequestIDFrom. An X-Request-Id the caller sent
// is not taken: it is a header value, which the logs never hold (a client may put anything
// there, its API key included), and the id goes into the access log and into events.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := newRequestID()
		w.Header().Set(RequestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

// RequestIDFrom returns the request id RequestID stored in ctx, or "".
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

// AccessLog logs one line per request with the route template (not the path, which may
// carry ids), method, status, resource id, request id and duration — never a header value,
// query string, key or body. Give it a logger with a logrus.JSONFormatter.
//
// Install it with Router.Use so that the matched route is known, and also wrap the router's
// NotFoundHandler and MethodNotAllowedHandler, which logs them as "unmatched".
//
// A handler that panics is answered 500 with the error body and logged with its stack, not
// left to net/http, which would drop the connection unanswered (an answer already begun is cut
// short: the client must not take it for whole).
func AccessLog(logger *logrus.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serveLogged(logger, routeTemplate, next, w, r)
		})
	}
}

// LogAs is AccessLog for a handler outside a router (the metrics, a redirect): route is its
// template. It gives the request its id too.
func LogAs(logger *logrus.Logger, route string, next http.Handler) http.Handler {
	return RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveLogged(logger, func(*http.Request) string { return route }, next, w, r)
	}))
}

// serveLogged serves r with next and writes its access-log line, under the template route
// gives; a panic of next is answered and logged as AccessLog says.
func serveLogged(logger *logrus.Logger, route func(*http.Request) string, next http.Handler, w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		p := recover()
		if p != nil && p != http.ErrAbortHandler { // ErrAbortHandler: net/http's own way to cut an answer short
			logger.WithFields(logrus.Fields{"request_id": RequestIDFrom(r.Context()), "panic": fmt.Sprint(p), "stack": string(debug.Stack())}).
				Error("request handler panicked")
			if rec.status == 0 {
				WriteError(rec, http.StatusInternalServerError, CodeInternal, "internal error")
				p = nil
			} else {
				// Its answer had begun: cut it, so the client sees it incomplete.
				rec.status, p = http.StatusInternalServerError, http.ErrAbortHandler
			}
		}
		logRequest(logger, r, route(r), StatusSeen(r, rec.Status()), start)
		if p != nil {
			panic(p)
		}
	}()
	next.ServeHTTP(rec, r)
}

// StatusClientClosed is the status logged and counted for a request whose client went away
// before its answer (nginx's 499): no client ever sees it.
const StatusClientClosed = 499

// StatusSeen is the status to log and count for r answered with status: a 5xx written after
// r's client went away (its context canceled: the charge it waited on given up, a 503 to
// nobody) is StatusClientClosed, so that the service's failures are not mixed with its
// clients' impatience (docs/operations.md, "Metrics").
func StatusSeen(r *http.Request, status int) int {
	if status >= 500 && errors.Is(r.Context().Err(), context.Canceled) {
		return StatusClientClosed
	}
	return status
}

// logRequest writes the access-log line of r.
func logRequest(logger *logrus.Logger, r *http.Request, route string, status int, start time.Time) {
	fields := logrus.Fields{
		"route":       route,
		"method":      r.Method,
		"status":      status,
		"request_id":  RequestIDFrom(r.Context()),
		"duration_ms": float64(time.Since(start).Microseconds()) / 1000,
	}
	if id := resourceID(r); id != "" {
		fields["resource_id"] = id
	}
	logger.WithFields(fields).Info("request")
}

// resourceID is the most specific id in the route's variables.
func resourceID(r *http.Request) string {
	vars := mux.Vars(r)
	for _, name := range []string{"keyId", "placeId", "accountId", "outageId"} {
		if v := vars[name]; v != "" {
			// A router that matches the path as sent (the read API's) leaves it encoded.
			if decoded, err := url.PathUnescape(v); err == nil {
				return decoded
			}
			return v
		}
	}
	return ""
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Status is the status written, 200 when the handler wrote nothing.
func (s *statusRecorder) Status() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// LimitHeaders refuses a request whose request line and headers exceed n bytes with a 431
// and the error body, with a request id and an access-log line (route "unmatched": no router
// saw it). (net/http's own MaxHeaderBytes, set higher as the hard cap, answers in plain text.)
// count, when not nil, also serves the refusals (the request metrics, which wrap the handler
// behind this and so never see one).
func LimitHeaders(n int, logger *logrus.Logger, count func(http.Handler) http.Handler) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		var refuse http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Connection", "close")
			WriteError(w, http.StatusRequestHeaderFieldsTooLarge, CodeBadRequest,
				fmt.Sprintf("request headers are larger than %d bytes", n))
		})
		if count != nil {
			refuse = count(refuse)
		}
		refuse = LogAs(logger, "unmatched", refuse)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			size := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
			for k, vs := range r.Header {
				for _, v := range vs {
					size += len(k) + len(v) + 4
				}
			}
			if size > n {
				refuse.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// LimitBody caps request bodies at n bytes; reading past it gives *http.MaxBytesError,
// which MapError turns into a 413.
func LimitBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body != nil {
				r.Body = http.MaxBytesReader(w, r.Body, n)
			}
			next.ServeHTTP(w, r)
		})
	}
}

// AnswerWriteTimeout bounds the writing of an answer, from when it starts to be written.
const AnswerWriteTimeout = 30 * time.Second

// AnswerInFull gives every answer of next the whole AnswerWriteTimeout from when it starts to
// be written, and each later write of it as long again. net/http's WriteTimeout runs from when
// the request was read: work that outlasted it (a 64 MiB catalog import, a purchase waiting on
// an account's lock) was done, committed, and its answer cut off, so the caller saw an empty
// reply and could not tell what happened. A long streamed answer (ledger.csv) is bounded per
// write, not in total; a client that stops reading is still cut off.
func AnswerInFull(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&freshDeadline{ResponseWriter: w, rc: http.NewResponseController(w)}, r)
	})
}

type freshDeadline struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (f *freshDeadline) WriteHeader(status int) {
	_ = f.rc.SetWriteDeadline(time.Now().Add(AnswerWriteTimeout)) // not every writer has one
	f.ResponseWriter.WriteHeader(status)
}

func (f *freshDeadline) Write(b []byte) (int, error) {
	_ = f.rc.SetWriteDeadline(time.Now().Add(AnswerWriteTimeout))
	return f.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (f *freshDeadline) Unwrap() http.ResponseWriter { return f.ResponseWriter }

type processStopKey struct{}

// WithProcessStop is a server's base context (http.Server.BaseContext) that carries stop: the
// context that ends when the process stops for good (its shutdown wait over). Detach reads it.
func WithProcessStop(base, stop context.Context) context.Context {
	return context.WithValue(base, processStopKey{}, stop)
}

// Detach is ctx without its request's cancellation, for a command that must run to its end
// once started even if the caller goes away (a bonus grant, a console key replacement). It
// still ends when the process stops for good (WithProcessStop), so that a command waiting on
// a row another transaction holds does not keep a stopping process alive; such a command is
// left to be finished by asking again (a grant resumes at the next start).
func Detach(ctx context.Context) (context.Context, context.CancelFunc) {
	d, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop, ok := ctx.Value(processStopKey{}).(context.Context)
	if !ok {
		return d, cancel
	}
	unhook := context.AfterFunc(stop, cancel)
	return d, func() {
		unhook()
		cancel()
	}
}

// SameSecret reports whether a and b are the same non-empty secret, in time that tells nothing
// of either: both are hashed first, so neither how many leading bytes match nor how long the
// expected secret is shows in the time taken (subtle.ConstantTimeCompare returns at once on
// lengths that differ).
func SameSecret(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return a != "" && b != "" && subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
