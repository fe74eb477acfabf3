package grpclimit_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/grpclimit"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/adaptertest"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

var _ ratelimit.Limiter = (*grpclimit.Interceptor)(nil)

func mustInterceptor(t *testing.T, l *ratewarden.Limiter, hopts []httplimit.Option, opts ...grpclimit.Option) *grpclimit.Interceptor {
	t.Helper()
	mw, err := httplimit.New(l, hopts...)
	if err != nil {
		t.Fatal(err)
	}
	i, err := grpclimit.New(mw, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// serveHealth starts a real grpc-go server with the health service on a
// loopback port and returns a client of it; both stop with the test.
func serveHealth(t *testing.T, opts ...grpc.ServerOption) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		hs.Shutdown()
		srv.Stop()
		<-done
	})
	return healthpb.NewHealthClient(conn)
}

func callCtx(t *testing.T) context.Context {
	// A cap for a hung call, far above what one takes on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// checkDenied asserts err is ResourceExhausted with RetryInfo of 1 s to
// the limit's period, and QuotaFailure naming the policy.
func checkDenied(t *testing.T, what string, err error, policy string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), `Rate limit "`+policy+`" exceeded`) {
		t.Errorf("%s: %v; want ResourceExhausted naming %q", what, err, policy)
		return
	}
	var retry, quota bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			s := d.GetRetryDelay().AsDuration()
			retry = s >= time.Second && s <= time.Hour && s%time.Second == 0
		case *errdetails.QuotaFailure:
			quota = len(d.GetViolations()) == 1 && d.GetViolations()[0].GetSubject() == "policy:"+policy
		}
	}
	if !retry || !quota {
		t.Errorf("%s: details %v; want RetryInfo (1 s to 1 h) and QuotaFailure", what, st.Details())
	}
}

// Three grpc-go servers, each with its own Redis client, share one
// redis-server: 10 per hour admits exactly 10 unary calls in total; the
// admitted carry the rate limit headers as header metadata, counted
// across the servers, the denied ResourceExhausted with RetryInfo and the
// headers (Retry-After among them) as trailer metadata.
func TestUnaryReplicasShareOneRedis(t *testing.T) {
	srv := testredis.Start(t)
	var clients []healthpb.HealthClient
	for range 3 {
		i := mustInterceptor(t, adaptertest.RedisLimiter(t, srv.Addr), []httplimit.Option{httplimit.WithLimits(adaptertest.PerHour)})
		clients = append(clients, serveHealth(t, grpc.ChainUnaryInterceptor(i.Unary())))
	}
	ctx := callCtx(t)
	allowed, denied := 0, 0
	for n := range 30 {
		var header, trailer metadata.MD
		_, err := clients[n%3].Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err == nil {
			allowed++
			want := strconv.Itoa(10 - allowed)
			if got := first(header, "x-ratelimit-remaining"); got != want {
				t.Errorf("call %d: x-ratelimit-remaining %q, want %s", n, got, want)
			}
			name := strconv.Quote(adaptertest.PerHour.String()) // "10/1h sliding_log"
			if first(header, "ratelimit-policy") != name+";q=10;w=3600" || !strings.HasPrefix(first(header, "ratelimit"), name+";r="+want+";t=") {
				t.Errorf("call %d: header %v", n, header)
			}
			continue
		}
		denied++
		checkDenied(t, "call "+strconv.Itoa(n), err, adaptertest.PerHour.String())
		ra, _ := strconv.Atoi(first(trailer, "retry-after"))
		if ra < 1 || ra > 3600 || first(trailer, "x-ratelimit-remaining") != "0" || first(trailer, "x-ratelimit-limit") != "10" {
			t.Errorf("call %d: trailer %v", n, trailer)
		}
	}
	if allowed != 10 || denied != 20 {
		t.Errorf("%d allowed, %d denied; want exactly 10 and 20", allowed, denied)
	}
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Streams are decided once, when they open: three servers on one Redis
// admit exactly 10 Watch streams; a rule per method (Match by path) keeps
// the unary Check on its own counters; denied streams end with
// ResourceExhausted and RetryInfo.
func TestStreamReplicasPerMethod(t *testing.T) {
	srv := testredis.Start(t)
	watch := httplimit.Rule{
		Name:     "watch",
		Match:    func(r *http.Request) bool { return r.URL.Path == "/grpc.health.v1.Health/Watch" },
		Policies: []httplimit.Policy{{Name: "watches", Limit: adaptertest.PerHour}},
	}
	var clients []healthpb.HealthClient
	for range 3 {
		i := mustInterceptor(t, adaptertest.RedisLimiter(t, srv.Addr), []httplimit.Option{httplimit.WithRule(watch), httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 2, Period: time.Hour})})
		clients = append(clients, serveHealth(t, grpc.ChainUnaryInterceptor(i.Unary()), grpc.ChainStreamInterceptor(i.Stream())))
	}
	allowed := 0
	for n := range 24 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		stream, err := clients[n%3].Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if err == nil {
			allowed++
			if h, _ := stream.Header(); first(h, "x-ratelimit-remaining") != strconv.Itoa(10-allowed) {
				t.Errorf("stream %d: header %v", n, h)
			}
		} else {
			checkDenied(t, "stream "+strconv.Itoa(n), err, "watches")
			if first(stream.Trailer(), "retry-after") == "" {
				t.Errorf("stream %d: trailer %v", n, stream.Trailer())
			}
		}
		cancel()
	}
	if allowed != 10 {
		t.Errorf("%d streams admitted, want exactly 10", allowed)
	}
	// The unary method has its own rule: 2, untouched by the streams.
	ctx := callCtx(t)
	var codesSeen []codes.Code
	for n := range 3 {
		_, err := clients[n].Check(ctx, &healthpb.HealthCheckRequest{})
		codesSeen = append(codesSeen, status.Code(err))
	}
	if codesSeen[0] != codes.OK || codesSeen[1] != codes.OK || codesSeen[2] != codes.ResourceExhausted {
		t.Errorf("unary codes %v; want OK OK ResourceExhausted", codesSeen)
	}
}

// An Interceptor is a go-grpc-middleware ratelimit.Limiter: through that
// package's interceptor, three servers on one Redis still admit exactly
// the limit, and denials are ResourceExhausted.
func TestGoGRPCMiddlewareLimiter(t *testing.T) {
	srv := testredis.Start(t)
	var clients []healthpb.HealthClient
	for range 3 {
		i := mustInterceptor(t, adaptertest.RedisLimiter(t, srv.Addr), []httplimit.Option{httplimit.WithLimits(adaptertest.PerHour)})
		clients = append(clients, serveHealth(t, grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(i))))
	}
	ctx := callCtx(t)
	got := map[codes.Code]int{}
	for n := range 15 {
		var header metadata.MD
		_, err := clients[n%3].Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		got[status.Code(err)]++
		if err == nil && first(header, "x-ratelimit-limit") != "10" {
			t.Errorf("call %d: header %v", n, header)
		}
	}
	if got[codes.OK] != 10 || got[codes.ResourceExhausted] != 5 {
		t.Errorf("codes %v; want 10 OK, 5 ResourceExhausted", got)
	}
}

// Keys from metadata and the method: httplimit.Header reads metadata, and
// httplimit.Pattern is the full method. A call without the metadata key
// is InvalidArgument.
func TestKeysFromMetadataAndMethod(t *testing.T) {
	i := mustInterceptor(t, adaptertest.MemLimiter(t), []httplimit.Option{
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Hour}),
		httplimit.WithKey(httplimit.Join(httplimit.Pattern, httplimit.Header("x-api-key"))),
	})
	c := serveHealth(t, grpc.ChainUnaryInterceptor(i.Unary()))
	ctx := callCtx(t)
	call := func(key string) codes.Code {
		cctx := ctx
		if key != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		}
		_, err := c.Check(cctx, &healthpb.HealthCheckRequest{})
		return status.Code(err)
	}
	if got := []codes.Code{call("a"), call("a"), call("b"), call("")}; got[0] != codes.OK || got[1] != codes.ResourceExhausted || got[2] != codes.OK || got[3] != codes.InvalidArgument {
		t.Errorf("codes %v; want OK ResourceExhausted OK InvalidArgument", got)
	}
	md := metadata.Pairs("x-api-key", "k", ":authority", "svc.example")
	r := grpclimit.Request(metadata.NewIncomingContext(context.Background(), md), "/pkg.Svc/Get")
	if r.URL.Path != "/pkg.Svc/Get" || r.Pattern != "/pkg.Svc/Get" || r.Header.Get("X-Api-Key") != "k" || r.Host != "svc.example" || r.Method != http.MethodPost {
		t.Errorf("request view %+v", r)
	}
}

// Custom answers, and no metadata.
func TestOptions(t *testing.T) {
	sentinel := status.Error(codes.Unavailable, "come back later")
	i := mustInterceptor(t, adaptertest.MemLimiter(t), []httplimit.Option{httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Hour})},
		grpclimit.WithDeniedHandler(func(context.Context, httplimit.Info) error { return sentinel }), grpclimit.WithMetadata(false))
	c := serveHealth(t, grpc.ChainUnaryInterceptor(i.Unary()))
	ctx := callCtx(t)
	var header, trailer metadata.MD
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header)); err != nil || first(header, "ratelimit") != "" {
		t.Errorf("first call: %v, header %v", err, header)
	}
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer)); status.Code(err) != codes.Unavailable || first(trailer, "retry-after") != "" {
		t.Errorf("second call: %v, trailer %v", err, trailer)
	}
	for _, tc := range []struct {
		opts []grpclimit.Option
		want string
	}{
		{[]grpclimit.Option{nil}, "option 0 is nil"},
		{[]grpclimit.Option{grpclimit.WithDeniedHandler(nil)}, "WithDeniedHandler"},
		{[]grpclimit.Option{grpclimit.WithErrorHandler(nil)}, "WithErrorHandler"},
	} {
		mw, _ := httplimit.New(adaptertest.MemLimiter(t), httplimit.WithLimits(adaptertest.PerHour))
		if _, err := grpclimit.New(mw, tc.opts...); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v; want %q", err, tc.want)
		}
	}
	if _, err := grpclimit.New(nil); !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Errorf("New(nil): %v", err)
	}
}

// Six goroutines calling three servers at once: still exactly the limit,
// as each decision is one atomic script run in Redis.
func TestUnaryConcurrentExact(t *testing.T) {
	srv := testredis.Start(t)
	var clients []healthpb.HealthClient
	for range 3 {
		i := mustInterceptor(t, adaptertest.RedisLimiter(t, srv.Addr), []httplimit.Option{httplimit.WithLimits(adaptertest.PerHour)})
		clients = append(clients, serveHealth(t, grpc.ChainUnaryInterceptor(i.Unary())))
	}
	ctx := callCtx(t)
	var ok, exhausted atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for n := range 10 {
				_, err := clients[(w+n)%3].Check(ctx, &healthpb.HealthCheckRequest{})
				switch status.Code(err) {
				case codes.OK:
					ok.Add(1)
				case codes.ResourceExhausted:
					exhausted.Add(1)
				default:
					t.Errorf("call: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 10 || exhausted.Load() != 50 {
		t.Errorf("%d OK, %d ResourceExhausted; want exactly 10 and 50", ok.Load(), exhausted.Load())
	}
}

// The proxy checks see metadata: x-forwarded-for from a peer while no
// proxy is trusted is logged once, however many calls carry it.
func TestProxyWarningThroughMetadata(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	i := mustInterceptor(t, adaptertest.MemLimiter(t), []httplimit.Option{httplimit.WithLimits(adaptertest.PerHour), httplimit.WithLogger(logger)})
	c := serveHealth(t, grpc.ChainUnaryInterceptor(i.Unary()))
	ctx := metadata.AppendToOutgoingContext(callCtx(t), "x-forwarded-for", "203.0.113.9")
	for range 5 {
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 || !strings.Contains(buf.String(), "no proxy is trusted") {
		t.Errorf("log %q: want one warning", buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
