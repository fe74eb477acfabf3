package telemetry

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
)

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

// Meter returns st timed, counted and (with a tracer) traced as the
// store of failure policy fp: the store a Limiter of that policy decides
// on.
func Meter(st ratewarden.Store, fp fallback.Policy, m *Metrics, tr trace.Tracer) ratewarden.Store {
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

// permitOutcomeKey marks a context (WithPermitOutcome) in which a Release
// or Extend reports whether the store held the permit.
type permitOutcomeKey struct{}

// WithPermitOutcome returns ctx and where the metered store will write
// whether the permit a Release or Extend made with it was held:
// ratewarden.Permit.Release does not say, and /v1/release answers it.
func WithPermitOutcome(ctx context.Context) (context.Context, *bool) {
	held := new(bool)
	return context.WithValue(ctx, permitOutcomeKey{}, held), held
}

func (s *meteredStore) observe(ctx context.Context, op int, start time.Time, err error) {
	s.dur[op].Observe(time.Since(start).Seconds())
	if ratewarden.Classify(ctx, err) == ratewarden.StoreUnavailable {
		s.errs[op].Inc()
	}
}
