package metrics

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kyapi/kyapi/projections"
)

// scrapeTimeout bounds the database reads of one scrape, so a slow database slows a scrape
// down and never hangs it.
const scrapeTimeout = 5 * time.Second

var (
	poolConns = prometheus.NewDesc("kyapi_db_pool_connections", "Connections of the database pool, by state (acquired, idle, constructing, total, max).", []string{"state"}, nil)
	poolWaits = prometheus.NewDesc("kyapi_db_pool_acquire_waits_total", "Acquires that had to wait for a connection.", nil, nil)
	poolWait  = prometheus.NewDesc("kyapi_db_pool_acquire_wait_seconds_total", "Time spent waiting to acquire a connection.", nil, nil)
	poolAcqs  = prometheus.NewDesc("kyapi_db_pool_acquires_total", "Connections acquired from the pool.", nil, nil)

	lagDesc    = prometheus.NewDesc("kyapi_projection_lag_events", "Committed events a projection has still to apply (counted up to 1,000,000).", []string{"projection"}, nil)
	failedDesc = prometheus.NewDesc("kyapi_projection_failed_tries", "Tries of the projection's current range that failed in a row (0 while it applies its ranges).", []string{"projection"}, nil)
	lagUpDesc  = prometheus.NewDesc("kyapi_projection_lag_up", "1 when the projection's lag could be read at this scrape, 0 otherwise.", []string{"projection"}, nil)
)

// poolCollector reports pgxpool's statistics at each scrape.
type poolCollector struct{ pool *pgxpool.Pool }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConns
	ch <- poolWaits
	ch <- poolWait
	ch <- poolAcqs
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	for state, v := range map[string]int32{"acquired": s.AcquiredConns(), "idle": s.IdleConns(),
		"constructing": s.ConstructingConns(), "total": s.TotalConns(), "max": s.MaxConns()} {
		ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(v), state)
	}
	ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWait, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds())
	ch <- prometheus.MustNewConstMetric(poolAcqs, prometheus.CounterValue, float64(s.AcquireCount()))
}

// lagCollector reads each projection's lag at each scrape (projections.Statuses).
type lagCollector struct {
	pool *pgxpool.Pool
	ps   []projections.Projection
}

func (c lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagDesc
	ch <- lagUpDesc
}

func (c lagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	for _, st := range projections.Statuses(ctx, c.pool, c.ps) {
		up := 1.0
		if st.Err != nil {
			up = 0
		} else {
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(st.Lag), st.Name)
		}
		ch <- prometheus.MustNewConstMetric(lagUpDesc, prometheus.GaugeValue, up, st.Name)
	}
}

// failedTriesCollector reports each projection's failed tries in a row (Source.FailedTries).
type failedTriesCollector func() map[string]int

func (c failedTriesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- failedDesc }

func (c failedTriesCollector) Collect(ch chan<- prometheus.Metric) {
	for name, n := range c() {
		ch <- prometheus.MustNewConstMetric(failedDesc, prometheus.GaugeValue, float64(n), name)
	}
}
