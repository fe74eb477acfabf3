package peerdiff

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestLightClient: the load's light client (h2Conn) answers as grpc-go's
// client does, request by request, on ratewarden serve in memory: OK,
// OVER_LIMIT, and the InvalidArgument errors of a request without a
// domain or without descriptors, code and message. Then many callers at
// once on one connection (more DATA than the connection's first send
// window) are all answered; calls given up on leave the connection
// working; and once the service is gone, a call fails instead of
// waiting. PEERDIFF_LOAD_OURS, a ratewarden binary, is used in place of
// one built from this checkout, as in TestLoadRatio.
func TestLightClient(t *testing.T) {
	dir := t.TempDir()
	bin := os.Getenv("PEERDIFF_LOAD_OURS")
	if bin == "" {
		bin = buildOurs(t, dir)
	}
	cfgDir := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "load.yaml"), []byte(loadConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "serve", "--config", cfgDir, "--http-addr", freeAddr(t), "--grpc-addr", addr, "--log-level", "warn", "--rls-headers", "none")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	svc := startProc(t, "ratewarden", cmd, addr, nil)
	h2, err := dialH2(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h2.close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// outcome describes an answer: the overall code, or the status error.
	outcome := func(code rlspb.RateLimitResponse_Code, err error) string {
		if err == nil {
			return code.String()
		}
		st, ok := status.FromError(err)
		if !ok {
			return "error without a gRPC status: " + err.Error()
		}
		return fmt.Sprintf("error %v: %s", st.Code(), st.Message())
	}
	light := func(req *rlspb.RateLimitRequest) string {
		k, err := h2.prepare(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return outcome(k.call(ctx))
	}
	for _, c := range []struct {
		name, want string
		req        *rlspb.RateLimitRequest
	}{
		{"under the limit", "OK", &rlspb.RateLimitRequest{Domain: "load", Descriptors: ds(d("user", "a"))}},
		{"over the limit", "OVER_LIMIT", &rlspb.RateLimitRequest{Domain: "load", Descriptors: ds(d("tenant", "t")), HitsAddend: 101}},
		{"unknown domain", "OK", &rlspb.RateLimitRequest{Domain: "nowhere", Descriptors: ds(d("user", "a"))}},
		{"no domain", "error InvalidArgument: domain is required", &rlspb.RateLimitRequest{Descriptors: ds(d("user", "a"))}},
		{"no descriptors", "error InvalidArgument: at least one descriptor is required", &rlspb.RateLimitRequest{Domain: "load"}},
	} {
		resp, err := svc.c.ShouldRateLimit(ctx, c.req)
		g, l := outcome(resp.GetOverallCode(), err), light(c.req)
		if g != c.want {
			t.Errorf("%s: grpc-go's client: %s, want %s", c.name, g, c.want)
		}
		if l != g {
			t.Errorf("%s: light client: %s; grpc-go's client: %s", c.name, l, g)
		}
	}

	// Many callers on the connection at once.
	const callers, each = 32, 100
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for i := range callers {
		wg.Go(func() {
			k, err := h2.prepare(ctx, &rlspb.RateLimitRequest{Domain: "load", Descriptors: ds(d("user", "c"+strconv.Itoa(i)))})
			if err != nil {
				t.Error(err)
				return
			}
			for range each {
				if code, err := k.call(ctx); err != nil || code != rlspb.RateLimitResponse_OK {
					mu.Lock()
					bad = append(bad, outcome(code, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("%d of %d concurrent calls not OK, the first: %s", len(bad), callers*each, bad[0])
	}

	// Calls given up on: deadlines of 10µs to 400µs end before the
	// request is sent, or while it is in flight (the call resets its
	// stream), or after the answer; each outcome is right, and the call
	// after works.
	k, err := h2.prepare(ctx, &rlspb.RateLimitRequest{Domain: "load", Descriptors: ds(d("user", "a"))})
	if err != nil {
		t.Fatal(err)
	}
	nextID := func() uint32 {
		h2.mu.Lock()
		defer h2.mu.Unlock()
		return h2.nextID
	}
	inFlight := 0
	for i := range 40 {
		id := nextID()
		short, cancel := context.WithTimeout(ctx, time.Duration(10*(i+1))*time.Microsecond)
		code, err := k.call(short)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			if nextID() != id {
				inFlight++
			}
		case err != nil || code != rlspb.RateLimitResponse_OK:
			t.Errorf("call with a deadline of %dµs: %s, want OK or the deadline", 10*(i+1), outcome(code, err))
		}
		if code, err := k.call(ctx); err != nil || code != rlspb.RateLimitResponse_OK {
			t.Errorf("call after one with a deadline of %dµs: %s, want OK", 10*(i+1), outcome(code, err))
		}
	}
	h2.mu.Lock()
	open := h2.active
	h2.mu.Unlock()
	if open != 0 {
		t.Errorf("%d streams open after every call returned, want 0", open)
	}
	t.Logf("%d of 40 calls with short deadlines gave up in flight", inFlight)

	// The service gone: a call fails, within the test's deadline.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code, err := k.call(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call to a killed service: %s, want a connection error", outcome(code, err))
	}
}

// TestDecodeGRPCMessage: grpc-message's percent-encoding is undone, and
// what is not an escape is kept.
func TestDecodeGRPCMessage(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain", "a%20b": "a b", "%E2%9C%93 done": "✓ done", "100%": "100%", "%zz%4": "%zz%4", "%25": "%",
	} {
		if got := decodeGRPCMessage(in); got != want {
			t.Errorf("decodeGRPCMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

// sampleAnswer is a RateLimitResponse with fields of every wire type
// around its overall code.
func sampleAnswer() *rlspb.RateLimitResponse {
	return &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
			{Code: rlspb.RateLimitResponse_OK, LimitRemaining: 7, CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Name: "n"}},
			{Code: rlspb.RateLimitResponse_OVER_LIMIT},
		},
		RawBody: []byte("body"),
	}
}

// TestOverallCode: the overall code is read among the other fields of a
// RateLimitResponse, and a cut message is an error.
func TestOverallCode(t *testing.T) {
	b, err := proto.Marshal(sampleAnswer())
	if err != nil {
		t.Fatal(err)
	}
	if code, err := overallCode(b); err != nil || code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("overallCode = %v, %v; want OVER_LIMIT", code, err)
	}
	if code, err := overallCode(nil); err != nil || code != rlspb.RateLimitResponse_UNKNOWN {
		t.Errorf("overallCode of an empty message = %v, %v; want UNKNOWN (proto3's default)", code, err)
	}
	if _, err := overallCode(b[:len(b)-1]); err == nil {
		t.Error("overallCode of a cut message: no error")
	}
}

// BenchmarkOverallCode compares reading the overall code by hand with
// proto.Unmarshal of the whole answer.
func BenchmarkOverallCode(b *testing.B) {
	m, err := proto.Marshal(sampleAnswer())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("protowire", func(b *testing.B) {
		for b.Loop() {
			if _, err := overallCode(m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto.Unmarshal", func(b *testing.B) {
		for b.Loop() {
			var r rlspb.RateLimitResponse
			if err := proto.Unmarshal(m, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
