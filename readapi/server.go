// Package readapi is the public HTTP read API: routes, authentication, the per-key rate
// limit, metering and the success envelope, and one handler per data operation over the
// catalog read models and the place index.
package readapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/openapi"
	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/ratelimit"
)

// Meter authenticates keys and charges requests. commands.Meter is the production meter; an
// interface here lets a benchmark-only wiring (bench/unmetered) measure the handlers without
// metering.
type Meter interface {
	Authenticate(ctx context.Context, hash domain.KeyHash) (commands.Caller, error)
	// Verify re-reads a key's state, bypassing any cache (nil: usable).
	Verify(ctx context.Context, hash domain.KeyHash) error
	Charge(ctx context.Context, req commands.ChargeRequest) (commands.ChargeResult, error)
}

// Server answers the public read API.
type Server struct {
	Meter            Meter
	Pool             *pgxpool.Pool
	Index            placeindex.Index
	Clock            func() time.Time
	CanonicalBaseURL string
	// RateLimitPerMinute is the per-key request cap of accounts without their own;
	// ratelimit.DefaultPerMinute when 0.
	RateLimitPerMinute int
	// Limiter counts each key's requests; when nil, each Handler counts in the process.
	Limiter ratelimit.Limiter
	// UsageSettled, when set, returns once the usage read model holds every request answered
	// before it was called (bounded by the caller's wiring): trending waits for it, so that
	// the requests a client has just made count (docs/api.md, "Trending"). Nil: no wait.
	UsageSettled func(ctx context.Context) error
	Log          *logrus.Logger
}

// Handler returns the read API's routes.
func (s *Server) Handler() http.Handler {
	log := s.logger()
	limiter := s.Limiter
	if limiter == nil {
		limiter = ratelimit.NewLocal()
	}
	rechecks := &rateRechecks{last: map[domain.KeyHash]recheck{}}
	data := func(params []string, h dataHandler) http.Handler { return s.authorized(limiter, rechecks, params, h) }

	// Paths are routed as sent: not decoded first (an encoded '/' in a place id would choose
	// another route: a%2Fmenu the menu of a), and not cleaned with a redirect before
	// authentication (x/../y would answer for place y). A path that is not a route as sent
	// is an authenticated 404.
	r := mux.NewRouter().UseEncodedPath().SkipClean(true)
	r.Use(httpx.AccessLog(log))
	// The two requests served without a key; HEAD too, for monitors.
	keyless := map[string]http.HandlerFunc{
		"/healthz": func(w http.ResponseWriter, _ *http.Request) {
			httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		},
		"/openapi.json": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(openapi.DocumentFor(s.RateLimitPerMinute)) // the cap this server applies
		},
	}
	for path, h := range keyless {
		r.HandleFunc(path, h).Methods(http.MethodGet, http.MethodHead)
	}

	// Each route with the query parameters it reads: their lengths are checked (paramLimits)
	// before the handler parses them.
	routes := []struct {
		path   string
		params []string
		h      dataHandler
	}{
		{"/api/data/places", []string{"town", "q", "limit", "offset"}, s.listPlaces},
		{"/api/data/places/{placeId}", nil, s.placeDetail},
		{"/api/data/places/{placeId}/menu", nil, s.placeMenu},
		{"/api/data/places/{placeId}/reviews", nil, s.placeReviews},
		{"/api/data/places/{placeId}/related", nil, s.relatedPlaces},
		{"/api/data/search", []string{"lat", "lng", "radius", "limit", "offset"}, s.searchPlaces},
		{"/api/data/trending", nil, s.trending},
		{"/api/data/hidden-gems", []string{"town", "limit"}, s.hiddenGems},
		{"/api/data/towns", nil, s.towns},
		{"/api/data/events", []string{"town", "from", "to"}, s.events},
	}
	for _, rt := range routes {
		r.Handle(rt.path, data(rt.params, rt.h)).Methods(http.MethodGet)
	}

	// Every other request needs a key too (only the two above are served without one), and
	// is checked in the same order as the data routes: a wrong path or method is found out
	// after authentication and the rate limit, like any 400 or 404.
	r.NotFoundHandler = httpx.AccessLog(log)(data(nil, func(http.ResponseWriter, *http.Request, caller) error {
		return &notFoundError{httpx.CodeNotFound, "no such route"}
	}))
	r.MethodNotAllowedHandler = httpx.AccessLog(log)(data(nil, func(w http.ResponseWriter, r *http.Request, _ caller) error {
		allow := http.MethodGet
		if _, ok := keyless[r.URL.Path]; ok {
			allow += ", " + http.MethodHead
		}
		return &methodError{method: r.Method, allow: allow}
	}))
	return httpx.RequestID(r)
}

func (s *Server) logger() *logrus.Logger {
	if s.Log != nil {
		return s.Log
	}
	return logrus.StandardLogger()
}

func (s *Server) now() time.Time {
	if s.Clock == nil {
		return time.Now().UTC()
	}
	return s.Clock().UTC()
}

// caller is the authenticated key behind a data request, as authentication found it; the
// charge carries it on.
type caller = commands.Caller

// dataHandler answers one data operation for an authenticated, rate-limited caller. It
// writes only success; every error it returns is written by authorized, uncharged.
type dataHandler func(w http.ResponseWriter, r *http.Request, c caller) error

// authorized runs the checks every data route shares, in the contract's order:
// authentication (401/403), the per-key rate limit (429), the length of every parameter the
// route reads (400); then the handler, whose errors (400, 404, 402, 5xx) it writes.
func (s *Server) authorized(limiter ratelimit.Limiter, rechecks *rateRechecks, params []string, h dataHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := domain.ParseAuthorizationFields(r.Header.Values("Authorization"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		hash := domain.HashKey(key)
		c, err := s.Meter.Authenticate(r.Context(), hash)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		now := s.now()
		limit := c.RateLimitPerMinute // the account's own, carried by the key cache
		if limit == 0 {
			limit = s.RateLimitPerMinute
		}
		q := limiter.Take(r.Context(), c.KeyID, limit, now)
		// The seconds told (RateLimit's t, Retry-After) run from the answer, not from the
		// request's arrival: a window the store started when it answered has no more than its
		// 60 s left then, and t never exceeds the policy's w.
		now = s.now()
		hdr := w.Header()
		hdr.Set("X-RateLimit-Limit", strconv.Itoa(q.Limit))
		hdr.Set("X-RateLimit-Remaining", strconv.Itoa(q.Remaining))
		hdr.Set("X-RateLimit-Reset", strconv.FormatInt(q.ResetUnix(), 10))
		hdr.Set("RateLimit-Policy", q.PolicyHeader())
		hdr.Set("RateLimit", q.Header(now))
		if !q.Allowed {
			// Refused for its rate, a key revoked on another process a moment ago (before
			// this process heard of it) gets its 403 first, as the order of checks says.
			if keyErr := rechecks.keyError(r.Context(), s, hash); keyErr != nil {
				dropRateHeaders(hdr)
				s.writeError(w, r, keyErr)
				return
			}
			hdr.Set("Retry-After", strconv.FormatInt(q.RetryAfter(now), 10))
			httpx.WriteError(w, http.StatusTooManyRequests, httpx.CodeRateLimited,
				"rate limit of "+strconv.Itoa(q.Limit)+" requests per minute exceeded; retry after the Retry-After seconds")
			return
		}
		err = dropBody(w, r)
		if err == nil {
			err = checkParams(r, params)
		}
		if err == nil {
			reads, cancel := context.WithTimeout(context.WithValue(r.Context(), chargeContextKey{}, r.Context()), readWait)
			err = h(w, r.WithContext(reads), c)
			cancel()
		}
		if err != nil {
			err = s.keyErrorFirst(r.Context(), hash, err)
			if status := errorStatus(err); status == http.StatusUnauthorized || status == http.StatusForbidden {
				dropRateHeaders(hdr)
			}
			s.writeError(w, r, err)
		}
	})
}

// readWait bounds a data request's reads (the read models, the place index), from when its
// handler starts until its charge: a read waiting on a table another transaction holds (an
// operator's LOCK TABLE or ALTER TABLE, `kyapi rebuild` of usage) or on a connection that
// stopped answering must not keep its connection of the pool, and its request, for as long as
// that lasts, whatever its client's patience: as many such reads as the pool has connections
// would leave every other request and charge of the process waiting with them. Past it the
// request answers 503, outcome none, nothing charged (docs/limits.md, "Read API"). The key's
// lookup and the charge are bounded apart, as long (commands.KeyCache.LookupWait,
// commands.MeterOptions.BatchWait).
const readWait = 10 * time.Second

// chargeContextKey holds, in the context a data handler's reads run on (bounded by readWait),
// the request's own: the charge runs on that one, which ends only when the client goes away,
// so the reads' bound never cuts a charge short.
type chargeContextKey struct{}

// rateHeaders are the rate-limit fields of an authenticated answer.
var rateHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"}

// dropRateHeaders takes the rate-limit fields off an answer that turned out to be a key's 401
// or 403 (a key revoked a moment ago on another process, found when it was read again): like
// the 403 answered from the key cache, it is no answer to an authenticated request and has no
// quota to tell.
func dropRateHeaders(h http.Header) {
	for _, name := range rateHeaders {
		h.Del(name)
	}
}

// maxIgnoredBody bounds the body a read request may carry; it means nothing and is dropped.
const maxIgnoredBody = 64 << 10

// dropBody reads a request's body, if it has one, to its end and drops it. net/http watches for
// a client going away only once the body has been read: unread, a GET whose client sent a body
// ("{}", as some client libraries do) and then left while its charge waited in the queue would
// still be charged, its context never ended. A body over maxIgnoredBody is a 413.
func dropBody(w http.ResponseWriter, r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	_, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, maxIgnoredBody))
	var tooLarge *http.MaxBytesError
	if err != nil && !errors.As(err, &tooLarge) {
		return httpx.BadRequest("the request body could not be read: %v", err)
	}
	return err
}

// keyErrorFirst keeps the contract's order of checks exact for a key revoked on another
// process a moment ago, before this process's key cache heard of it: before any refusal of the
// request itself (400, 404, 405, 413; a 429 is checked where it is written) is answered, the
// key is read again from the write model, and its 401/403 wins. (Data and charges never depend
// on this: every charge re-checks the key under the account lock, and so does a 402.)
func (s *Server) keyErrorFirst(ctx context.Context, hash domain.KeyHash, err error) error {
	switch status := errorStatus(err); {
	case status < 400 || status >= 500, status == http.StatusPaymentRequired,
		status == http.StatusUnauthorized, status == http.StatusForbidden:
		return err
	}
	if keyErr := s.keyError(ctx, hash); keyErr != nil {
		return keyErr
	}
	return err
}

// rateRecheckEvery is how often a key refused for its rate is read again (rateRechecks).
const rateRecheckEvery = time.Second

// rateRechecks reads a key refused for its rate again from the write model at most once per
// rateRecheckEvery, and shares what it read with the key's other refusals meanwhile: a flood
// of requests over their limit costs the database a read per key and second, not one per
// request, which is what the limit is there to spare it. A key revoked on another process a
// moment ago may so be answered 429 rather than 403 for up to that second (refused either way).
type rateRechecks struct {
	mu   sync.Mutex
	last map[domain.KeyHash]recheck
}

type recheck struct {
	at  time.Time
	err error
}

func (c *rateRechecks) keyError(ctx context.Context, s *Server, hash domain.KeyHash) error {
	now := time.Now()
	c.mu.Lock()
	if r, ok := c.last[hash]; ok && now.Sub(r.at) < rateRecheckEvery {
		c.mu.Unlock()
		return r.err
	}
	if len(c.last) >= 10_000 { // keys not refused lately are forgotten
		for h, r := range c.last {
			if now.Sub(r.at) >= rateRecheckEvery {
				delete(c.last, h)
			}
		}
	}
	c.last[hash] = recheck{at: now} // the key's refusals meanwhile take it as it was cached
	c.mu.Unlock()
	err := s.keyError(ctx, hash)
	c.mu.Lock()
	c.last[hash] = recheck{at: now, err: err}
	c.mu.Unlock()
	return err
}

// keyError is the 401/403 of a key read again from the write model, bypassing the cache; nil
// when it is usable or cannot be read.
func (s *Server) keyError(ctx context.Context, hash domain.KeyHash) error {
	if err := s.Meter.Verify(ctx, hash); errors.Is(err, domain.ErrKeyRevoked) || errors.Is(err, domain.ErrInvalidKey) {
		return err
	}
	return nil
}

// Error codes for catalog lookups; httpx.MapError covers the rest.
const (
	codeNoMenuData   = "no_menu_data"
	codeNoReviewData = "no_review_data"
)

// notFoundError is a 404 about the catalog: an unknown place, or a place without the
// requested data.
type notFoundError struct{ code, msg string }

func (e *notFoundError) Error() string { return e.msg }

// methodError is a 405: a route the read API has, asked with a method it does not answer.
type methodError struct{ method, allow string }

func (e *methodError) Error() string {
	return "method " + e.method + " is not allowed here; allowed: " + e.allow
}

func errPlaceNotFound(id string) error {
	return &notFoundError{httpx.CodeNotFound, "place " + strconv.Quote(id) + " not found"}
}

// errorStatus is the status writeError answers err with.
func errorStatus(err error) int {
	var nf *notFoundError
	var me *methodError
	switch {
	case errors.As(err, &nf):
		return http.StatusNotFound
	case errors.As(err, &me):
		return http.StatusMethodNotAllowed
	}
	return httpx.MapError(err).Status
}

// writeError writes err as the error body. Catalog 404s carry their own code; everything
// else goes through the one mapper, httpx.MapError. Server errors are logged, without
// anything from the request but its id.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var nf *notFoundError
	if errors.As(err, &nf) {
		httpx.WriteError(w, http.StatusNotFound, nf.code, nf.msg)
		return
	}
	var me *methodError
	if errors.As(err, &me) {
		w.Header().Set("Allow", me.allow)
		httpx.WriteError(w, http.StatusMethodNotAllowed, httpx.CodeBadRequest, me.Error())
		return
	}
	// A 402 says the balance it was refused at, as every metered answer does (docs/api.md).
	var ic *domain.InsufficientCreditsError
	if errors.As(err, &ic) {
		w.Header().Set("X-Credits-Remaining", strconv.FormatInt(ic.Balance, 10))
	}
	e := httpx.MapError(err)
	if e.Status >= 500 && !errors.Is(err, context.Canceled) {
		s.logger().WithFields(logrus.Fields{
			"request_id": httpx.RequestIDFrom(r.Context()),
			"error":      err.Error(),
		}).Error("read API request failed")
	}
	e.Write(w)
}
