package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratewarden/ratewarden"
)

// Span attribute keys of store calls.
const (
	attrFailure = attribute.Key("ratewarden.failure_policy")
	attrLimits  = attribute.Key("ratewarden.limits")
	attrAllowed = attribute.Key("ratewarden.allowed")
	attrSource  = attribute.Key("ratewarden.source")
	attrHeld    = attribute.Key("ratewarden.permit_held")
)

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
