package server

import (
	"context"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"google.golang.org/grpc/metadata"

	"github.com/ratewarden/ratewarden"
)

// tracerName is the instrumentation scope of the server's spans.
const tracerName = "github.com/ratewarden/ratewarden/service/server"

// WithTracerProvider traces decisions with tp: a span per gRPC
// ShouldRateLimit call (and per /json request, which makes one),
// "ratelimit.ShouldRateLimit", with the domain, the number of
// descriptors and the overall code; under it a span per store call,
// "ratewarden.store.check" (or .peek, .reset), with the failure policy,
// the number of limits, the outcome and the error. No span carries a
// descriptor's values or a caller's key: they can be addresses or
// credentials. The spans join the caller's trace when its gRPC metadata
// or /json headers carry one (W3C traceparent).
// Nil, the default, is no tracing, at no cost.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

// Span attribute keys.
const (
	attrDomain      = attribute.Key("ratelimit.domain")
	attrDescriptors = attribute.Key("ratelimit.descriptors")
	attrOverall     = attribute.Key("ratelimit.overall_code")
	attrFailure     = attribute.Key("ratewarden.failure_policy")
	attrLimits      = attribute.Key("ratewarden.limits")
	attrAllowed     = attribute.Key("ratewarden.allowed")
	attrSource      = attribute.Key("ratewarden.source")
	attrHeld        = attribute.Key("ratewarden.permit_held")
)

// traceRLS runs decide in a ShouldRateLimit span when tracing is on.
func (s *Server) traceRLS(ctx context.Context, req *rlspb.RateLimitRequest, decide func(context.Context) (*rlspb.RateLimitResponse, error)) (*rlspb.RateLimitResponse, error) {
	if s.tracer == nil {
		return decide(ctx)
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = propagation.TraceContext{}.Extract(ctx, mdCarrier(md))
	}
	ctx, span := s.tracer.Start(ctx, "ratelimit.ShouldRateLimit", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrDomain.String(req.GetDomain()), attrDescriptors.Int(len(req.GetDescriptors()))))
	defer span.End()
	resp, err := decide(ctx)
	if err != nil {
		span.SetStatus(codes.Error, "refused")
		span.RecordError(err)
		return resp, err
	}
	span.SetAttributes(attrOverall.String(resp.GetOverallCode().String()))
	return resp, nil
}

// traceStore starts a store call's span when tracing is on; one of the
// span's end methods ends it with the call's outcome.
func (s *meteredStore) traceStore(ctx context.Context, op int, limits int) (context.Context, storeSpan) {
	if s.tracer == nil {
		return ctx, storeSpan{}
	}
	ctx, span := s.tracer.Start(ctx, "ratewarden.store."+opNames[op], trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrFailure.String(s.fp), attrLimits.Int(limits)))
	return ctx, storeSpan{ctx: ctx, span: span}
}

// storeSpan is a store call's span; the zero storeSpan (no tracing) does
// nothing.
type storeSpan struct {
	ctx  context.Context
	span trace.Span
}

// end ends the span, with err's class as an error status.
func (sp storeSpan) end(err error) {
	if sp.span == nil {
		return
	}
	if err != nil {
		sp.span.SetStatus(codes.Error, ratewarden.Classify(sp.ctx, err).String())
		sp.span.RecordError(err)
	}
	sp.span.End()
}

// endResults ends a check's span: whether every limit allowed, and who
// decided.
func (sp storeSpan) endResults(res []ratewarden.Result, err error) {
	if sp.span == nil {
		return
	}
	if err != nil || len(res) == 0 {
		sp.end(err)
		return
	}
	allowed := true
	for _, r := range res {
		allowed = allowed && r.Allowed
	}
	sp.endDecision(allowed, res[0].Source, nil)
}

// endDecision ends a check's or an acquire's span.
func (sp storeSpan) endDecision(allowed bool, source ratewarden.Source, err error) {
	if sp.span == nil {
		return
	}
	if err == nil {
		sp.span.SetAttributes(attrAllowed.Bool(allowed), attrSource.String(source.String()))
	}
	sp.end(err)
}

// endHeld ends a release's or an extend's span: whether the permit was
// held.
func (sp storeSpan) endHeld(held bool, err error) {
	if sp.span == nil {
		return
	}
	if err == nil {
		sp.span.SetAttributes(attrHeld.Bool(held))
	}
	sp.end(err)
}

// mdCarrier reads trace context from gRPC metadata.
type mdCarrier metadata.MD

func (c mdCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
