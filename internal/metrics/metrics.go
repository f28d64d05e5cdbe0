// Package metrics holds the service's Prometheus metrics, served at GET /metrics on the admin
// listener (docs/operations.md, "Console and metrics"). Labels are route templates, statuses,
// outcomes and projection names: never a key, token, account id or e-mail.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/projections"
)

// Metrics is one process's registry and the instruments the service updates.
type Metrics struct {
	registry   *prometheus.Registry
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	refused    *prometheus.CounterVec
	charges    *prometheus.CounterVec
	credits    prometheus.Counter
	batches    prometheus.Histogram
	claimReads *prometheus.CounterVec
	decided    *prometheus.CounterVec
}

// Source is what the metrics read at each scrape: the pool's statistics and the projections
// whose lag is reported. Either may be nil/empty.
type Source struct {
	Pool        *pgxpool.Pool
	Projections []projections.Projection
	// FailedTries, when set, is each projection's count of failed tries of its current range
	// in a row (projections.Runner.FailedTries).
	FailedTries func() map[string]int
}

// New registers the service's metrics, the Go runtime's and the process's.
func New(src Source) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kyapi_http_requests_total",
			Help: "HTTP requests answered, by API (read, admin, console), route template, method and status.",
		}, []string{"api", "route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kyapi_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by API and route template.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"api", "route"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kyapi_read_refused_total",
			Help: "Read API requests refused for credits (402) or rate (429), by status.",
		}, []string{"status"}),
		charges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kyapi_charges_total",
			Help: "Charges decided by the meter, by outcome: paid, deduplicated (nothing to pay), refused (402).",
		}, []string{"outcome"}),
		credits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kyapi_credits_charged_total",
			Help: "Credits charged by metered requests.",
		}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kyapi_meter_batch_size",
			Help:    "Charges per group-commit batch transaction.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		claimReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kyapi_meter_claim_reads_total",
			Help: "Accounts whose dedup claims a charge batch read from the database: behind (after the claims the meter held; another process charged the account) or cold (the meter held none: the day's claim chunks and the charges after them).",
		}, []string{"kind"}),
		decided: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kyapi_meter_decisions_total",
			Help: "Charges the meter decided, by what from: memory (the state it held of the account, written in one round trip) or lock (the account read under its lock: first charge here, or the account changed meanwhile).",
		}, []string{"from"}),
	}
	for _, k := range []string{"behind", "cold"} {
		m.claimReads.WithLabelValues(k)
	}
	for _, k := range []string{"memory", "lock"} {
		m.decided.WithLabelValues(k)
	}
	// Each outcome and refusal is present from the start, so a rate() has a series to read.
	for _, o := range []string{"paid", "deduplicated", "refused"} {
		m.charges.WithLabelValues(o)
	}
	for _, s := range []string{"402", "429"} {
		m.refused.WithLabelValues(s)
	}
	m.registry.MustRegister(m.requests, m.duration, m.refused, m.charges, m.credits, m.batches, m.claimReads, m.decided,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if src.FailedTries != nil {
		m.registry.MustRegister(failedTriesCollector(src.FailedTries))
	}
	if src.Pool != nil {
		m.registry.MustRegister(poolCollector{src.Pool})
		if len(src.Projections) > 0 {
			m.registry.MustRegister(lagCollector{src.Pool, src.Projections})
		}
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Observe counts and times every request of one API. It wraps the API's whole handler; the
// route template comes from httpx.AccessLog inside it (httpx.WithRouteSlot).
func (m *Metrics) Observe(api string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		r, route := httpx.WithRouteSlot(r)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		rt := route()
		m.requests.WithLabelValues(api, rt, methodLabel(r.Method), strconv.Itoa(httpx.StatusSeen(r, rec.status))).Inc()
		m.duration.WithLabelValues(api, rt).Observe(time.Since(start).Seconds())
		if api == "read" && (rec.status == http.StatusPaymentRequired || rec.status == http.StatusTooManyRequests) {
			m.refused.WithLabelValues(strconv.Itoa(rec.status)).Inc()
		}
	})
}

// ObserveRoute is Observe for a handler that is not a router with httpx.AccessLog inside: every
// request is counted under the given route.
func (m *Metrics) ObserveRoute(api, route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		m.requests.WithLabelValues(api, route, methodLabel(r.Method), strconv.Itoa(httpx.StatusSeen(r, rec.status))).Inc()
		m.duration.WithLabelValues(api, route).Observe(time.Since(start).Seconds())
	})
}

// methodLabel is the method label of a request: a standard method, or "other" for any method
// a client makes up, so that no caller can add series (docs/operations.md, "Metrics").
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// BatchSize records the size of a group-commit batch (commands.MeterOptions.BeforeBatch).
func (m *Metrics) BatchSize(n int) { m.batches.Observe(float64(n)) }

// ClaimsRead counts the accounts whose dedup claims a batch read (commands.MeterOptions.OnClaimsRead).
func (m *Metrics) ClaimsRead(behind, cold int) {
	m.claimReads.WithLabelValues("behind").Add(float64(behind))
	m.claimReads.WithLabelValues("cold").Add(float64(cold))
}

// Decided counts how a batch's charges were decided (commands.MeterOptions.OnDecided).
func (m *Metrics) Decided(fromMemory, underLock int) {
	m.decided.WithLabelValues("memory").Add(float64(fromMemory))
	m.decided.WithLabelValues("lock").Add(float64(underLock))
}

// WatchMeter reports, at each scrape, what the meter keeps in memory: kyapi_meter_claims_held
// (commands.Meter.ClaimsHeld), kyapi_meter_claims_forgotten_total (commands.Meter.ClaimsForgotten)
// and kyapi_meter_accounts_held (commands.Meter.AccountsHeld).
func (m *Metrics) WatchMeter(claims func() int, forgotten func() int64, accounts func() int) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kyapi_meter_claims_held",
		Help: "Dedup claims (resources paid today, per account) the meter keeps in memory.",
	}, func() float64 { return float64(claims()) }), prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "kyapi_meter_claims_forgotten_total",
		Help: "Accounts whose dedup claims of the day the meter forgot to stay within METER_MAX_CLAIMS; each is read back from the store when next charged.",
	}, func() float64 { return float64(forgotten()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kyapi_meter_accounts_held",
		Help: "Accounts whose state (balance, stream head, keys) the meter keeps in memory to decide their charges without reading them first.",
	}, func() float64 { return float64(accounts()) }))
}

// meter is the read API's meter as the read API sees it (readapi.Meter).
type meter interface {
	Authenticate(ctx context.Context, hash domain.KeyHash) (commands.Caller, error)
	Charge(ctx context.Context, req commands.ChargeRequest) (commands.ChargeResult, error)
	Verify(ctx context.Context, hash domain.KeyHash) error
}

// Meter wraps a meter so that every charge's outcome and credits are counted.
func (m *Metrics) Meter(inner meter) *CountingMeter { return &CountingMeter{inner: inner, m: m} }

// CountingMeter is a meter whose charges are counted (Metrics.Meter).
type CountingMeter struct {
	inner meter
	m     *Metrics
}

func (c *CountingMeter) Authenticate(ctx context.Context, hash domain.KeyHash) (commands.Caller, error) {
	return c.inner.Authenticate(ctx, hash)
}

func (c *CountingMeter) Verify(ctx context.Context, hash domain.KeyHash) error {
	return c.inner.Verify(ctx, hash)
}

func (c *CountingMeter) Charge(ctx context.Context, req commands.ChargeRequest) (commands.ChargeResult, error) {
	res, err := c.inner.Charge(ctx, req)
	switch {
	case errors.Is(err, domain.ErrInsufficientCredits):
		c.m.charges.WithLabelValues("refused").Inc()
	case err != nil:
		// Not a decision (revoked key, database error): the request metrics count it.
	case res.Credits > 0:
		c.m.charges.WithLabelValues("paid").Inc()
		c.m.credits.Add(float64(res.Credits))
	case len(res.Deduplicated) > 0:
		c.m.charges.WithLabelValues("deduplicated").Inc()
	}
	return res, err
}

type statusRecorder struct {
	http.ResponseWriter
	status  int
	written bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.written {
		s.status, s.written = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.written = true
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
