package server_test

import (
	"context"
	"math"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server"
)

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

func exampleServer(t *testing.T) rlspb.RateLimitServiceClient {
	t.Helper()
	cfg, err := config.Load(examplePath("envoy-example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return rlsClient(t, start(t, memBackend(t), server.WithConfig(cfg)))
}

// codes of the statuses of r.
func codesOf(r *rlspb.RateLimitResponse) []rlspb.RateLimitResponse_Code {
	var out []rlspb.RateLimitResponse_Code
	for _, s := range r.GetStatuses() {
		out = append(out, s.GetCode())
	}
	return out
}

func wantCodes(t *testing.T, what string, r *rlspb.RateLimitResponse, overall rlspb.RateLimitResponse_Code, each ...rlspb.RateLimitResponse_Code) {
	t.Helper()
	got := codesOf(r)
	if r.GetOverallCode() != overall || len(got) != len(each) {
		t.Fatalf("%s: overall %v statuses %v, want %v %v", what, r.GetOverallCode(), got, overall, each)
	}
	for i := range each {
		if got[i] != each[i] {
			t.Fatalf("%s: overall %v statuses %v, want %v %v", what, r.GetOverallCode(), got, overall, each)
		}
	}
}

// TestEnvoyExampleConfig runs examples/config/envoy-example.yaml through
// the gRPC service and checks each documented behaviour of the format.
func TestEnvoyExampleConfig(t *testing.T) {
	c := exampleServer(t)
	hc := hourlyServer(t) // aligns to the hour; then the minute:
	alignWindow(t, time.Minute, 15*time.Second)

	t.Run("key only: each value counts separately", func(t *testing.T) {
		// The example's 10/second, as 10/hour in a test-only domain: a
		// second-long window could end between the 10th and 11th request.
		r := shouldRL(t, hc, "hourly", 10, desc("remote_address", "10.0.0.1"))
		wantCodes(t, "10 hits", r, ok, ok)
		if s := r.Statuses[0]; s.GetLimitRemaining() != 0 || s.GetCurrentLimit().GetRequestsPerUnit() != 10 || s.GetCurrentLimit().GetUnit() != rlspb.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("status %v", s)
		}
		wantCodes(t, "11th", shouldRL(t, hc, "hourly", 1, desc("remote_address", "10.0.0.1")), over, over)
		wantCodes(t, "other address", shouldRL(t, hc, "hourly", 1, desc("remote_address", "10.0.0.2")), ok, ok)
		// The example's own limit answers with its unit.
		r = shouldRL(t, c, "edge", 1, desc("remote_address", "10.0.0.1"))
		if s := r.Statuses[0]; s.GetCurrentLimit().GetRequestsPerUnit() != 10 || s.GetCurrentLimit().GetUnit() != rlspb.RateLimitResponse_RateLimit_SECOND {
			t.Errorf("example status %v", s)
		}
	})
	t.Run("specific value overrides the key-only default", func(t *testing.T) {
		for range 5 { // hits_addend 0 means 1
			wantCodes(t, "someone", shouldRL(t, c, "edge", 0, desc("client_id", "someone")), ok, ok)
		}
		wantCodes(t, "someone 6th", shouldRL(t, c, "edge", 0, desc("client_id", "someone")), over, over)
		r := shouldRL(t, c, "edge", 100, desc("client_id", "partner"))
		wantCodes(t, "partner 100", r, ok, ok)
		if r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 100 {
			t.Errorf("partner limit %v", r.Statuses[0].GetCurrentLimit())
		}
		wantCodes(t, "partner 101st", shouldRL(t, c, "edge", 1, desc("client_id", "partner")), over, over)
	})
	t.Run("unlimited", func(t *testing.T) {
		r := shouldRL(t, c, "edge", 1000, desc("client_id", "internal"))
		wantCodes(t, "internal", r, ok, ok)
		if r.Statuses[0].GetLimitRemaining() != math.MaxUint32 {
			t.Errorf("unlimited remaining %d", r.Statuses[0].GetLimitRemaining())
		}
	})
	t.Run("nested descriptors", func(t *testing.T) {
		for range 3 {
			wantCodes(t, "login", shouldRL(t, c, "edge", 1, desc("path", "/login", "remote_address", "1.2.3.4")), ok, ok)
		}
		wantCodes(t, "login 4th", shouldRL(t, c, "edge", 1, desc("path", "/login", "remote_address", "1.2.3.4")), over, over)
		// The parent alone has no rate_limit: no limit.
		r := shouldRL(t, c, "edge", 1, desc("path", "/login"))
		wantCodes(t, "login alone", r, ok, ok)
		if r.Statuses[0].GetCurrentLimit() != nil {
			t.Errorf("a node without rate_limit reported %v", r.Statuses[0].GetCurrentLimit())
		}
		// Entries left over after a leaf: no limit.
		wantCodes(t, "too deep", shouldRL(t, c, "edge", 1, desc("remote_address", "1.2.3.4", "path", "/x")), ok, ok)
	})
	t.Run("value prefix", func(t *testing.T) {
		// The example's 20/second, as 20/hour in a test-only domain.
		wantCodes(t, "/api/users", shouldRL(t, hc, "hourly", 20, desc("path", "/api/users")), ok, ok)
		wantCodes(t, "/api/users 21st", shouldRL(t, hc, "hourly", 1, desc("path", "/api/users")), over, over)
		wantCodes(t, "/api/orders", shouldRL(t, hc, "hourly", 1, desc("path", "/api/orders")), ok, ok)
		r := shouldRL(t, hc, "hourly", 1000, desc("path", "/apiary"))
		wantCodes(t, "no prefix match", r, ok, ok)
		r = shouldRL(t, c, "edge", 1000, desc("path", "/apiary"))
		wantCodes(t, "no prefix match in the example", r, ok, ok)
		if r.Statuses[0].GetCurrentLimit() != nil {
			t.Errorf("/apiary matched %v", r.Statuses[0].GetCurrentLimit())
		}
	})
	t.Run("requests_per_unit 0 is always over", func(t *testing.T) {
		r := shouldRL(t, c, "edge", 1, desc("path", "/admin"))
		wantCodes(t, "admin", r, over, over)
		if r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 0 {
			t.Errorf("admin limit %v", r.Statuses[0].GetCurrentLimit())
		}
	})
	t.Run("shadow mode", func(t *testing.T) {
		wantCodes(t, "shadow 2", shouldRL(t, c, "edge", 2, desc("experiment", "a")), ok, ok)
		// Over the limit, a shadow descriptor's status is OK with 0
		// remaining, as envoyproxy/ratelimit answers it.
		r := shouldRL(t, c, "edge", 1, desc("experiment", "a"))
		wantCodes(t, "shadow 3rd", r, ok, ok)
		if st := r.Statuses[0]; st.GetLimitRemaining() != 0 || st.GetCurrentLimit().GetRequestsPerUnit() != 2 || st.GetDurationUntilReset().AsDuration() <= 0 {
			t.Errorf("shadow 3rd status %v", st)
		}
	})
	t.Run("replaces", func(t *testing.T) {
		// Alone, per_client (5/min) applies.
		wantCodes(t, "per_client", shouldRL(t, c, "edge", 5, desc("client_id", "repl")), ok, ok)
		// With the premium descriptor, per_client is not evaluated.
		r := shouldRL(t, c, "edge", 1, desc("client_id", "repl"), desc("plan", "premium"))
		wantCodes(t, "premium replaces per_client", r, ok, ok, ok)
		if r.Statuses[0].GetCurrentLimit() != nil || r.Statuses[1].GetCurrentLimit().GetName() != "premium" {
			t.Errorf("statuses %v", r.Statuses)
		}
	})
	t.Run("extension: token bucket with burst", func(t *testing.T) {
		wantCodes(t, "burst", shouldRL(t, c, "edge", 10, desc("api_key", "k1")), ok, ok)
		wantCodes(t, "burst exhausted", shouldRL(t, c, "edge", 1, desc("api_key", "k1")), over, over)
	})
	t.Run("unknown domain is OK", func(t *testing.T) {
		r := shouldRL(t, c, "nope", 1000, desc("path", "/admin"))
		wantCodes(t, "unknown domain", r, ok, ok)
		if r.Statuses[0].GetCurrentLimit() != nil || len(r.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("unknown domain: %v", r)
		}
	})
	t.Run("a rejected request consumes nothing from its other descriptors", func(t *testing.T) {
		r := shouldRL(t, c, "edge", 3, desc("client_id", "c3"), desc("path", "/admin"))
		wantCodes(t, "c3 + admin", r, over, ok, over)
		r = shouldRL(t, c, "edge", 4, desc("client_id", "c3"), desc("client_id", "c4"), desc("client_id", "c5"))
		wantCodes(t, "c3..c5", r, ok, ok, ok, ok)
		if r.Statuses[0].GetLimitRemaining() != 1 {
			t.Errorf("c3 remaining %d, want 1 (5 - 4: the rejected 3 were not consumed)", r.Statuses[0].GetLimitRemaining())
		}
		// c4 has 1 left, c6 5: 2 hits fail on c4, so c6 keeps all.
		wantCodes(t, "c4 + c6", shouldRL(t, c, "edge", 2, desc("client_id", "c4"), desc("client_id", "c6")), over, over, ok)
		wantCodes(t, "c6 full", shouldRL(t, c, "edge", 5, desc("client_id", "c6")), ok, ok)
		// More hits than the limit's capacity can never pass, and take nothing.
		r = shouldRL(t, c, "edge", 6, desc("client_id", "cap"))
		wantCodes(t, "6 of capacity 5", r, over, over)
		if st := r.Statuses[0]; st.GetLimitRemaining() != 0 || st.GetDurationUntilReset().AsDuration() <= 0 {
			t.Errorf("cap status %v, want 0 remaining and the window's end, as envoyproxy/ratelimit", st)
		}
		wantCodes(t, "cap full", shouldRL(t, c, "edge", 5, desc("client_id", "cap")), ok, ok)
	})
	t.Run("same key twice in one request counts both", func(t *testing.T) {
		wantCodes(t, "dup", shouldRL(t, c, "edge", 3, desc("client_id", "dup"), desc("client_id", "dup")), over, over, over)
		wantCodes(t, "dup after", shouldRL(t, c, "edge", 5, desc("client_id", "dup")), ok, ok)
	})
	t.Run("per-descriptor hits_addend and limit override", func(t *testing.T) {
		d := desc("client_id", "hd")
		d.HitsAddend = wrapperspb.UInt64(4)
		r := shouldRL(t, c, "edge", 1, d, desc("client_id", "hd2"))
		wantCodes(t, "per-descriptor hits", r, ok, ok, ok)
		if r.Statuses[0].GetLimitRemaining() != 1 || r.Statuses[1].GetLimitRemaining() != 4 {
			t.Errorf("remaining %d %d, want 1 4", r.Statuses[0].GetLimitRemaining(), r.Statuses[1].GetLimitRemaining())
		}
		o := desc("client_id", "ov")
		o.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typepb.RateLimitUnit_HOUR}
		wantCodes(t, "override 2", shouldRL(t, c, "edge", 2, o), ok, ok)
		wantCodes(t, "override 3rd", shouldRL(t, c, "edge", 1, o), over, over)
	})
	t.Run("response headers", func(t *testing.T) {
		r := shouldRL(t, c, "edge", 1, desc("client_id", "hdr"))
		h := map[string]string{}
		for _, kv := range r.GetResponseHeadersToAdd() {
			h[kv.GetKey()] = kv.GetValue()
		}
		if h["x-ratelimit-limit"] != "5" || h["x-ratelimit-remaining"] != "4" || h["ratelimit-policy"] != `"per_client";q=5;w=60` {
			t.Errorf("headers %v", h)
		}
	})
}

func TestGRPCBadInputConsumesNothing(t *testing.T) {
	c := exampleServer(t)
	alignWindow(t, time.Minute, 15*time.Second)
	neg := desc("client_id", "bad")
	neg.IsNegativeHits = true
	neg.HitsAddend = wrapperspb.UInt64(1)
	badUnit := desc("client_id", "bad")
	badUnit.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_UNKNOWN}
	cases := []struct {
		name string
		req  *rlspb.RateLimitRequest
	}{
		{"no domain", &rlspb.RateLimitRequest{Descriptors: []*rlcommon.RateLimitDescriptor{desc("client_id", "bad")}}},
		{"no descriptors", &rlspb.RateLimitRequest{Domain: "edge"}},
		{"empty descriptor", &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("client_id", "bad"), {}}}},
		{"empty entry key", &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("client_id", "bad"), desc("", "x")}}},
		{"negative hits", &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("client_id", "bad"), neg}}},
		{"unsupported override unit", &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("client_id", "bad"), badUnit}}},
	}
	for _, tc := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), requestCap)
		_, err := c.ShouldRateLimit(ctx, tc.req)
		cancel()
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tc.name, err)
		}
	}
	// Nothing consumed: client_id=bad still has all 5.
	wantCodes(t, "bad after", shouldRL(t, c, "edge", 5, desc("client_id", "bad")), ok, ok)
}

func TestGRPCHealth(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)))
	hc := healthClient(t, s)
	eventually(t, waitCap, "SERVING", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), requestCap)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: rlspb.RateLimitService_ServiceDesc.ServiceName})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

// TestGRPCReflection: grpcurl-style clients discover the service and its
// message types without .proto files.
func TestGRPCReflection(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)))
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), requestCap)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []*reflectionpb.ServerReflectionRequest{
		{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}},
		{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "envoy.service.ratelimit.v3.RateLimitService"}},
	} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			t.Fatalf("reflection error: %v", e)
		}
		if ls := resp.GetListServicesResponse(); ls != nil {
			found := false
			for _, sv := range ls.GetService() {
				found = found || sv.GetName() == "envoy.service.ratelimit.v3.RateLimitService"
			}
			if !found {
				t.Errorf("services %v", ls.GetService())
			}
		}
	}
	_ = stream.CloseSend()
}
