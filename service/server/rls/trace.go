package rls

import (
	"context"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// Span attribute keys.
const (
	attrDomain      = attribute.Key("ratelimit.domain")
	attrDescriptors = attribute.Key("ratelimit.descriptors")
	attrOverall     = attribute.Key("ratelimit.overall_code")
)

// traceRLS runs decide in a ShouldRateLimit span when tracing is on.
func (g *Service) traceRLS(ctx context.Context, req *rlspb.RateLimitRequest, decide func(context.Context) (*rlspb.RateLimitResponse, error)) (*rlspb.RateLimitResponse, error) {
	if g.tracer == nil {
		return decide(ctx)
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = propagation.TraceContext{}.Extract(ctx, mdCarrier(md))
	}
	ctx, span := g.tracer.Start(ctx, "ratelimit.ShouldRateLimit", trace.WithSpanKind(trace.SpanKindServer),
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
