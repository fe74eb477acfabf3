package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
)

// metrics are the server's Prometheus series. Labels name APIs, domains,
// policies and descriptor paths from the config, never a caller's key or a
// request's descriptor values, so cardinality is bounded by the config.
type metrics struct {
	decisions *prometheus.CounterVec   // api, domain, policy, outcome
	degraded  *prometheus.CounterVec   // api, domain, policy, source
	storeDur  *prometheus.HistogramVec // op, failure_policy
	storeErrs *prometheus.CounterVec   // op, failure_policy
	reloads   *prometheus.CounterVec   // result
	problems  *prometheus.CounterVec   // type
	configOK  prometheus.Gauge
	info      *prometheus.GaugeVec   // source, version: one series, the config in force
	nearLimit *prometheus.CounterVec // api, domain, policy
	permits   *prometheus.CounterVec // policy, op, result
	settles   *prometheus.CounterVec // policy, result
	settled   *prometheus.CounterVec // policy, direction
}

// setVersion makes the config in force the one series of
// ratewarden_config_info.
func (m *metrics) setVersion(source, version string) {
	m.info.Reset()
	m.info.WithLabelValues(source, version).Set(1)
}

func newMetrics(reg *prometheus.Registry, b Backend) *metrics {
	m := &metrics{
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
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratewarden_config_reloads_total",
			Help: "Configuration loads by result (success, failure). A failed reload keeps the configuration in force.",
		}, []string{"result"}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratewarden_http_problems_total",
			Help: "HTTP answers with a problem (4xx, 5xx) by problem type (the last part of the type URI, e.g. store-unavailable).",
		}, []string{"type"}),
		configOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratewarden_config_last_reload_successful",
			Help: "1 when the last configuration load succeeded, 0 when it failed.",
		}),
	}
	m.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ratewarden_config_info",
		Help: "1 for the configuration in force: its source (file, static, xds) and version (the xDS version_info, or a hash of the files).",
	}, []string{"source", "version"})
	m.nearLimit = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratewarden_near_limit_total",
		Help: "Allowed hits that took a key past the near-limit ratio of its limit (NEAR_LIMIT_RATIO, default 0.8), counted as envoyproxy/ratelimit's near_limit: by API, domain and policy.",
	}, []string{"api", "domain", "policy"})
	m.permits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratewarden_permit_ends_total",
		Help: "Permits given back (op release: result released, or not_held when it had expired or been released) and extended (op extend: result extended, or lost when it had expired), by concurrency policy. Acquisitions are decisions (ratewarden_decisions_total).",
	}, []string{"policy", "op", "result"})
	m.settles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratewarden_settlements_total",
		Help: "Reservations settled, by policy (or inline) and result: charged (actual above the estimate), refunded (below), exact, uncounted (the reservation had consumed nothing: denied, or admitted by fail_open), refused (settled already).",
	}, []string{"policy", "result"})
	m.settled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratewarden_settled_units_total",
		Help: "Units that settlements charged or refunded and that took effect (less what a window gone by dropped), by policy (or inline) and direction (charged, refunded).",
	}, []string{"policy", "direction"})
	reg.MustRegister(m.decisions, m.degraded, m.storeDur, m.storeErrs, m.reloads, m.problems, m.configOK, m.info, m.nearLimit, m.permits, m.settles, m.settled,
		breakerCollector{b}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) decision(api, domain, policy string, res ratewarden.Result, shadow bool) {
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

// Store operations, as the op label names them.
const (
	opCheck = iota
	opPeek
	opReset
	opCharge
	opAcquire
	opRelease
	opExtend
	numOps
)

var opNames = [numOps]string{"check", "peek", "reset", "charge", "acquire", "release", "extend"}

// meteredStore is the Store a failure policy's Limiter decides on: it
// times every call to the backend's store (ratewarden_store_duration_seconds)
// and counts the failed ones (ratewarden_store_errors_total), by op and
// failure policy. A call the caller gave up on, or refused input, is not a
// store failure (ratewarden.Classify).
type meteredStore struct {
	ratewarden.Store
	dur    [numOps]prometheus.Observer
	errs   [numOps]prometheus.Counter
	fp     string
	tracer trace.Tracer // nil: no spans
}

func newMeteredStore(st ratewarden.Store, fp fallback.Policy, m *metrics, tr trace.Tracer) *meteredStore {
	ms := &meteredStore{Store: st, fp: fp.String(), tracer: tr}
	for op, name := range opNames {
		ms.dur[op] = m.storeDur.WithLabelValues(name, fp.String())
		ms.errs[op] = m.storeErrs.WithLabelValues(name, fp.String())
	}
	return ms
}

func (s *meteredStore) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	op := opCheck
	if req.Peek {
		op = opPeek
	}
	tctx, span := s.traceStore(ctx, op, len(req.Limits))
	start := time.Now()
	err := s.Store.Check(tctx, req, res)
	s.observe(ctx, op, start, err)
	span.endResults(res, err)
	return err
}

func (s *meteredStore) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	tctx, span := s.traceStore(ctx, opReset, len(limits))
	start := time.Now()
	err := s.Store.Reset(tctx, key, limits...)
	s.observe(ctx, opReset, start, err)
	span.end(err)
	return err
}

// Charge times and traces the backend store's Charge.
func (s *meteredStore) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	tctx, span := s.traceStore(ctx, opCharge, len(limits))
	start := time.Now()
	err := s.Store.Charge(tctx, key, limits, spent, applied)
	s.observe(ctx, opCharge, start, err)
	span.end(err)
	return err
}

// Acquire times and traces the backend store's Acquire.
func (s *meteredStore) Acquire(ctx context.Context, key, holder string, max int64, ttl time.Duration) (ratewarden.PermitResult, error) {
	tctx, span := s.traceStore(ctx, opAcquire, 1)
	start := time.Now()
	pr, err := s.Store.Acquire(tctx, key, holder, max, ttl)
	s.observe(ctx, opAcquire, start, err)
	span.endDecision(pr.Acquired, pr.Source, err)
	return pr, err
}

// Release times and traces the backend store's Release.
func (s *meteredStore) Release(ctx context.Context, key, holder string) (bool, error) {
	return s.permitCall(ctx, opRelease, func(ctx context.Context) (bool, error) {
		return s.Store.Release(ctx, key, holder)
	})
}

// Extend times and traces the backend store's Extend.
func (s *meteredStore) Extend(ctx context.Context, key, holder string, ttl time.Duration) (bool, error) {
	return s.permitCall(ctx, opExtend, func(ctx context.Context) (bool, error) {
		return s.Store.Extend(ctx, key, holder, ttl)
	})
}

// permitCall times and traces a Release or Extend.
func (s *meteredStore) permitCall(ctx context.Context, op int, call func(context.Context) (bool, error)) (bool, error) {
	tctx, span := s.traceStore(ctx, op, 1)
	start := time.Now()
	held, err := call(tctx)
	s.observe(ctx, op, start, err)
	span.endHeld(held, err)
	if out, _ := ctx.Value(permitOutcomeKey{}).(*bool); out != nil {
		*out = held
	}
	return held, err
}

// permitOutcomeKey marks a context (withPermitOutcome) in which a Release
// or Extend reports whether the store held the permit.
type permitOutcomeKey struct{}

// withPermitOutcome returns ctx and where the metered store will write
// whether the permit a Release or Extend made with it was held:
// ratewarden.Permit.Release does not say, and /v1/release answers it.
func withPermitOutcome(ctx context.Context) (context.Context, *bool) {
	held := new(bool)
	return context.WithValue(ctx, permitOutcomeKey{}, held), held
}

func (s *meteredStore) observe(ctx context.Context, op int, start time.Time, err error) {
	s.dur[op].Observe(time.Since(start).Seconds())
	if ratewarden.Classify(ctx, err) == ratewarden.StoreUnavailable {
		s.errs[op].Inc()
	}
}

var breakerDesc = prometheus.NewDesc("ratewarden_breaker_state",
	"Circuit breaker state of the store for each failure policy: 0 closed, 1 half-open, 2 open (decisions degraded).",
	[]string{"failure_policy"}, nil)

// breakerCollector reads the breaker states at scrape time.
type breakerCollector struct{ b Backend }

func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- breakerDesc }

func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	for fp, st := range c.b.Breakers() {
		ch <- prometheus.MustNewConstMetric(breakerDesc, prometheus.GaugeValue, float64(st), fp.String())
	}
}
