package main

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// otlpReceiver is an in-process OTLP/gRPC trace receiver.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	names map[string]string // resource attribute service.name
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			r.names[a.GetKey()] = a.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestServeTracing is the fifth acceptance test: with tracing on,
// an in-process OTLP receiver gets one span per decision with the domain
// and the outcome, a store span under each, and no descriptor value in
// any attribute.
func TestServeTracing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &otlpReceiver{names: map[string]string{}}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, recv)
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()

	cfgFile := writeFile(t, t.TempDir(), "edge.yaml", peerDomain)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	done := make(chan int, 1)
	env := map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SERVICE_NAME": "rl-test"}
	go func() {
		done <- run(ctx, []string{"serve", "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--config", cfgFile, "--log-format", "json",
			"--tracing-endpoint", ln.Addr().String()}, &bytes.Buffer{}, logs, func(k string) string { return env[k] })
	}()
	var grpcAddr string
	for i := 0; i < 6000 && grpcAddr == ""; i++ { // a minute at most
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			grpcAddr = m[2]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if grpcAddr == "" {
		t.Fatalf("serve did not listen:\n%s", logs.String())
	}
	c := rlspb.NewRateLimitServiceClient(dialPlain(t, grpcAddr))
	const decisionsSent = 4 // the 4th over the limit of 3
	for i := 0; i < decisionsSent; i++ {
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.ShouldRateLimit(rctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "secret-user-42"}}}}})
		rcancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	cancel() // the shutdown flushes the spans
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d:\n%s", code, logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop within a minute")
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	var rlsSpans, storeSpans []*tracepb.Span
	for _, s := range recv.spans {
		switch s.GetName() {
		case "ratelimit.ShouldRateLimit":
			rlsSpans = append(rlsSpans, s)
		case "ratewarden.store.check", "ratewarden.store.peek":
			storeSpans = append(storeSpans, s)
		}
		for _, a := range s.GetAttributes() {
			if regexp.MustCompile(`secret-user-42`).MatchString(a.GetValue().String()) {
				t.Errorf("span %s attribute %s carries the descriptor value", s.GetName(), a.GetKey())
			}
		}
	}
	if len(rlsSpans) != decisionsSent {
		t.Fatalf("%d ShouldRateLimit spans, want %d (all spans: %d)", len(rlsSpans), decisionsSent, len(recv.spans))
	}
	var outcomes []string
	for _, s := range rlsSpans {
		attrs := map[string]string{}
		for _, a := range s.GetAttributes() {
			attrs[a.GetKey()] = a.GetValue().GetStringValue()
		}
		if attrs["ratelimit.domain"] != "edge" {
			t.Errorf("span attributes %v: no domain", attrs)
		}
		outcomes = append(outcomes, attrs["ratelimit.overall_code"])
	}
	slices.Sort(outcomes)
	if !slices.Equal(outcomes, []string{"OK", "OK", "OK", "OVER_LIMIT"}) {
		t.Errorf("outcomes %v, want three OK and one OVER_LIMIT", outcomes)
	}
	parents := map[string]bool{}
	for _, s := range rlsSpans {
		parents[string(s.GetSpanId())] = true
	}
	under := 0
	for _, s := range storeSpans {
		if parents[string(s.GetParentSpanId())] {
			under++
		}
	}
	if under < decisionsSent {
		t.Errorf("%d store spans under a ShouldRateLimit span, want at least %d", under, decisionsSent)
	}
	if recv.names["service.name"] != "rl-test" {
		t.Errorf("resource %v: service.name is not TRACING_SERVICE_NAME", recv.names)
	}
}
