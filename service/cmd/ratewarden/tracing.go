package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingSettings are the OpenTelemetry tracing's, with --tracing.
type tracingSettings struct {
	endpoint, protocol string
	sampling           float64
	name, namespace    string
	instance           string
}

// tracing parses the tracing flags; nil when tracing is off.
func (f serveFlags) tracing() (*tracingSettings, error) {
	on, err := strconv.ParseBool(*f.tracingOn)
	if err != nil {
		return nil, fmt.Errorf("--tracing %q: want true or false", *f.tracingOn)
	}
	if !on {
		return nil, nil
	}
	t := &tracingSettings{endpoint: *f.tracingEndpoint, protocol: strings.ToLower(*f.tracingProtocol),
		name: *f.tracingName, namespace: f.getenv("TRACING_SERVICE_NAMESPACE"), instance: f.getenv("TRACING_SERVICE_INSTANCE_ID")}
	if t.protocol != "http" && t.protocol != "grpc" {
		return nil, fmt.Errorf("--tracing-protocol %q: want http or grpc", *f.tracingProtocol)
	}
	if t.sampling, err = strconv.ParseFloat(*f.tracingSampling, 64); err != nil || t.sampling < 0 || t.sampling > 1 {
		return nil, fmt.Errorf("--tracing-sampling-rate %q: want a number from 0 to 1", *f.tracingSampling)
	}
	return t, nil
}

// provider makes the tracer provider: an OTLP exporter (HTTP or gRPC; an
// endpoint without a scheme is plaintext, https:// is TLS; none: the
// exporter's OTEL_EXPORTER_OTLP_* environment, else localhost), batched,
// sampling the given share of traces that do not come sampled already.
func (t *tracingSettings) provider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	var exp *otlptrace.Exporter
	var err error
	url := strings.Contains(t.endpoint, "://")
	if t.protocol == "grpc" {
		var opts []otlptracegrpc.Option
		switch {
		case url:
			opts = append(opts, otlptracegrpc.WithEndpointURL(t.endpoint))
		case t.endpoint != "":
			opts = append(opts, otlptracegrpc.WithEndpoint(t.endpoint), otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		var opts []otlptracehttp.Option
		switch {
		case url:
			opts = append(opts, otlptracehttp.WithEndpointURL(t.endpoint))
		case t.endpoint != "":
			opts = append(opts, otlptracehttp.WithEndpoint(t.endpoint), otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", t.name)}
	if t.namespace != "" {
		attrs = append(attrs, attribute.String("service.namespace", t.namespace))
	}
	if t.instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", t.instance))
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.sampling))),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	), nil
}
