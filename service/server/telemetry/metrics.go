package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
)

// Metrics are the server's Prometheus series. Labels name APIs, domains,
// policies and descriptor paths from the config, never a caller's key or a
// request's descriptor values, so cardinality is bounded by the config.
// Decisions are counted through a Series (or Decision), store calls by the
// store Meter wraps.
type Metrics struct {
	decisions *prometheus.CounterVec   // api, domain, policy, outcome
	degraded  *prometheus.CounterVec   // api, domain, policy, source
	storeDur  *prometheus.HistogramVec // op, failure_policy
	storeErrs *prometheus.CounterVec   // op, failure_policy
	info      *prometheus.GaugeVec     // source, version: one series, the config in force

	Reloads   *prometheus.CounterVec // result
	Problems  *prometheus.CounterVec // type
	ConfigOK  prometheus.Gauge
	NearLimit *prometheus.CounterVec // api, domain, policy
	Permits   *prometheus.CounterVec // policy, op, result
	Settles   *prometheus.CounterVec // policy, result
	Settled   *prometheus.CounterVec // policy, direction
}

// SetVersion makes the config in force the one series of
// ratewarden_config_info.
func (m *Metrics) SetVersion(source, version string) {
	m.info.Reset()
	m.info.WithLabelValues(source, version).Set(1)
}

// New registers the series on reg, with the Go and process collectors
// and ratewarden_breaker_state, which reads breakers at scrape time.
func New(reg *prometheus.Registry, breakers func() map[fallback.Policy]fallback.State) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratewarden_decisions_total",
			Help: "Decisions by API (http, grpc), Envoy domain, policy (HTTP policy name, or the Envoy rate limit name or descriptor path) and outcome (allowed, denied, shadow_denied).",
		}, []string{"api", "domain", "policy", "outcome"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratewarden_degraded_decisions_total",
			Help: "Decisions made without the shared store, by the failure policy that made them (source: fail_open, fail_closed, local_fallback).",
		}, []string{"api", "domain", "policy", "source"}),
		storeDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratewarden_store_duration_seconds",
			Help:    "Latency of store calls (check, peek, reset, charge, acquire, release, extend) as the server sees them, fallback included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"op", "failure_policy"}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratewarden_store_errors_total",
			Help: "Store calls that returned an error (the request got 503 / UNAVAILABLE).",
		}, []string{"op", "failure_policy"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratewarden_config_reloads_total",
			Help: "Configuration loads by result (success, failure). A failed reload keeps the configuration in force.",
		}, []string{"result"}),
		Problems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratewarden_http_problems_total",
			Help: "HTTP answers with a problem (4xx, 5xx) by problem type (the last part of the type URI, e.g. store-unavailable).",
		}, []string{"type"}),
		ConfigOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratewarden_config_last_reload_successful",
			Help: "1 when the last configuration load succeeded, 0 when it failed.",
		}),
	}
	m.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ratewarden_config_info",
		Help: "1 for the configuration in force: its source (file, static, xds) and version (the xDS version_info, or a hash of the files).",
	}, []string{"source", "version"})
	m.NearLimit = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratewarden_near_limit_total",
		Help: "Allowed hits that took a key past the near-limit ratio of its limit (NEAR_LIMIT_RATIO, default 0.8), counted as envoyproxy/ratelimit's near_limit: by API, domain and policy.",
	}, []string{"api", "domain", "policy"})
	m.Permits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratewarden_permit_ends_total",
		Help: "Permits given back (op release: result released, or not_held when it had expired or been released) and extended (op extend: result extended, or lost when it had expired), by concurrency policy. Acquisitions are decisions (ratewarden_decisions_total).",
	}, []string{"policy", "op", "result"})
	m.Settles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratewarden_settlements_total",
		Help: "Reservations settled, by policy (or inline) and result: charged (actual above the estimate), refunded (below), exact, uncounted (the reservation had consumed nothing: denied, or admitted by fail_open), refused (settled already).",
	}, []string{"policy", "result"})
	m.Settled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratewarden_settled_units_total",
		Help: "Units that settlements charged or refunded and that took effect (less what a window gone by dropped), by policy (or inline) and direction (charged, refunded).",
	}, []string{"policy", "direction"})
	reg.MustRegister(m.decisions, m.degraded, m.storeDur, m.storeErrs, m.Reloads, m.Problems, m.ConfigOK, m.info, m.NearLimit, m.Permits, m.Settles, m.Settled,
		breakerCollector{breakers}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Decision counts a decision with result res of a policy that has no
// Series (an Envoy limit override).
func (m *Metrics) Decision(api, domain, policy string, res ratewarden.Result, shadow bool) {
	outcome := "allowed"
	switch {
	case !res.Allowed && shadow:
		outcome = "shadow_denied"
	case !res.Allowed:
		outcome = "denied"
	}
	m.decisions.WithLabelValues(api, domain, policy, outcome).Inc()
	if res.Degraded() {
		m.degraded.WithLabelValues(api, domain, policy, res.Source.String()).Inc()
	}
}

var breakerDesc = prometheus.NewDesc("ratewarden_breaker_state",
	"Circuit breaker state of the store for each failure policy: 0 closed, 1 half-open, 2 open (decisions degraded).",
	[]string{"failure_policy"}, nil)

// breakerCollector reads the breaker states at scrape time.
type breakerCollector struct {
	breakers func() map[fallback.Policy]fallback.State
}

func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- breakerDesc }

func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	for fp, st := range c.breakers() {
		ch <- prometheus.MustNewConstMetric(breakerDesc, prometheus.GaugeValue, float64(st), fp.String())
	}
}
