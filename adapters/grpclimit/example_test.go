package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"

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
)

// exampleServer serves the health service on loopback with opts and
// returns a client and a function that stops both.
func exampleServer(opts ...grpc.ServerOption) (healthpb.HealthClient, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	return healthpb.NewHealthClient(conn), func() { _ = conn.Close(); hs.Shutdown(); srv.Stop(); <-done }
}

func ExampleNew() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(2)))
	if err != nil {
		log.Fatal(err)
	}
	rl, err := grpclimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	client, stop := exampleServer(grpc.ChainUnaryInterceptor(rl.Unary()), grpc.ChainStreamInterceptor(rl.Stream()))
	defer stop()
	for range 3 {
		var header, trailer metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err != nil {
			st := status.Convert(err)
			fmt.Println(st.Code(), st.Message(), "retry-after:", trailer.Get("retry-after"))
			continue
		}
		fmt.Println("OK", header.Get("ratelimit"))
	}
	// Output:
	// OK ["2/1m";r=1;t=30]
	// OK ["2/1m";r=0;t=60]
	// ResourceExhausted Rate limit "2/1m" exceeded; retry in 30 s. retry-after: [30]
}

func ExampleInterceptor_Unary() {
	// Keyed by method and API key (metadata x-api-key).
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)),
		httplimit.WithKey(httplimit.Join(httplimit.Pattern, httplimit.Header("x-api-key"))))
	if err != nil {
		log.Fatal(err)
	}
	rl, err := grpclimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	client, stop := exampleServer(grpc.ChainUnaryInterceptor(rl.Unary()))
	defer stop()
	for _, key := range []string{"alice", "alice", "bob"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Println(key, status.Code(err))
	}
	// Output:
	// alice OK
	// alice ResourceExhausted
	// bob OK
}

func ExampleInterceptor_Stream() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	rl, err := grpclimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	client, stop := exampleServer(grpc.ChainStreamInterceptor(rl.Stream()))
	defer stop()
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		fmt.Println(status.Code(err))
		cancel()
	}
	// Output:
	// OK
	// ResourceExhausted
}

func ExampleInterceptor_Limit() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	rl, err := grpclimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	// With go-grpc-middleware/v2: ratelimit.UnaryServerInterceptor(rl).
	// Here Limit is called as that interceptor calls it.
	client, stop := exampleServer(grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := rl.Limit(ctx); err != nil {
			return nil, status.Errorf(codes.ResourceExhausted, "%s rejected: %s", info.FullMethod, err)
		}
		return handler(ctx, req)
	}))
	defer stop()
	for range 2 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// ResourceExhausted
}

func ExampleRequest() {
	md := metadata.Pairs("x-api-key", "k1")
	r := grpclimit.Request(metadata.NewIncomingContext(context.Background(), md), "/pkg.Orders/Get")
	key, _ := httplimit.Pattern(r)
	fmt.Println(r.Method, r.URL.Path, key, r.Header.Get("X-Api-Key"))
	// Output: POST /pkg.Orders/Get route:/pkg.Orders/Get k1
}

func ExampleDeniedStatus() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	mw.DecideKey(r, "k")
	st := grpclimit.DeniedStatus(mw.DecideKey(r, "k").Info)
	fmt.Println(st.Code(), st.Message())
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			fmt.Println("retry in", ri.GetRetryDelay().AsDuration())
		}
	}
	// Output:
	// ResourceExhausted Rate limit "1/1m" exceeded; retry in 60 s.
	// retry in 1m0s
}

func ExampleErrorStatus() {
	st := grpclimit.ErrorStatus(fmt.Errorf("no key: %w", ratewarden.ErrInvalidKey))
	fmt.Println(st.Code(), st.Message())
	// Output: InvalidArgument The request does not identify a client for rate limiting.
}

func ExampleWithDeniedHandler() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	rl, err := grpclimit.New(mw, grpclimit.WithDeniedHandler(func(ctx context.Context, info httplimit.Info) error {
		return status.Error(codes.Unavailable, "busy, rule "+info.Rule)
	}))
	if err != nil {
		log.Fatal(err)
	}
	client, stop := exampleServer(grpc.ChainUnaryInterceptor(rl.Unary()))
	defer stop()
	_, _ = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(err)
	// Output: rpc error: code = Unavailable desc = busy, rule default
}

func ExampleWithErrorHandler() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Header("x-api-key")))
	if err != nil {
		log.Fatal(err)
	}
	rl, err := grpclimit.New(mw, grpclimit.WithErrorHandler(func(ctx context.Context, err error) error {
		return status.Error(codes.Unauthenticated, "send x-api-key")
	}))
	if err != nil {
		log.Fatal(err)
	}
	client, stop := exampleServer(grpc.ChainUnaryInterceptor(rl.Unary()))
	defer stop()
	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(err)
	// Output: rpc error: code = Unauthenticated desc = send x-api-key
}

func ExampleWithMetadata() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(5)))
	if err != nil {
		log.Fatal(err)
	}
	rl, err := grpclimit.New(mw, grpclimit.WithMetadata(false))
	if err != nil {
		log.Fatal(err)
	}
	client, stop := exampleServer(grpc.ChainUnaryInterceptor(rl.Unary()))
	defer stop()
	var header metadata.MD
	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	fmt.Println(err, header.Get("ratelimit"))
	// Output: <nil> []
}

// Only calls that end NotFound count (say, probing for resources):
// httplimit.WithCountIf with a CountFunc reading the call's gRPC code.
// The health service answers NotFound for a service it does not know.
func ExampleCode() {
	notFound := func(r *http.Request, _ int) bool {
		c, ok := grpclimit.Code(r)
		return !ok || c == codes.NotFound // !ok: the handler panicked
	}
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerHour(2)), httplimit.WithCountIf(notFound))
	if err != nil {
		log.Fatal(err)
	}
	rl, err := grpclimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	client, stop := exampleServer(grpc.ChainUnaryInterceptor(rl.Unary()))
	defer stop()
	for _, service := range []string{"", "", "", "nope", "nope", "nope", ""} {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		fmt.Print(status.Code(err), " ")
	}
	fmt.Println()
	// Output: OK OK OK NotFound NotFound ResourceExhausted ResourceExhausted
}

func ExampleHTTPStatus() {
	for _, c := range []codes.Code{codes.OK, codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied, codes.ResourceExhausted, codes.Internal} {
		fmt.Println(c, grpclimit.HTTPStatus(c))
	}
	// Output:
	// OK 200
	// InvalidArgument 400
	// Unauthenticated 401
	// PermissionDenied 403
	// ResourceExhausted 429
	// Internal 500
}

func ExampleCodeOf() {
	fmt.Println(grpclimit.CodeOf(nil), grpclimit.CodeOf(status.Error(codes.Unauthenticated, "who?")),
		grpclimit.CodeOf(context.DeadlineExceeded), grpclimit.CodeOf(fmt.Errorf("boom")))
	// Output: OK Unauthenticated DeadlineExceeded Unknown
}
