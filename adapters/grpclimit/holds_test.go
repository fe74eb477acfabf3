package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/grpclimit"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/adaptertest"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// behaviour is the handler of the hold tests, as interceptors after the
// limiter's: the "x-behave" metadata "code:N" ends the call with code N,
// "panic" panics, "block" reports entered and waits for the gate; else
// the health service answers (a stream ends OK at once).
type behaviour struct {
	entered chan struct{}
	ran     atomic.Int64
	mu      sync.Mutex
	gate    chan struct{}
	stopped bool
}

func newBehaviour() *behaviour {
	return &behaviour{entered: make(chan struct{}, 64), gate: make(chan struct{})}
}

// act runs what ctx's metadata asks; done reports that the call ends with
// err without its handler.
func (b *behaviour) act(ctx context.Context) (done bool, err error) {
	b.ran.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	what := ""
	if v := md.Get("x-behave"); len(v) > 0 {
		what = v[0]
	}
	switch {
	case what == "panic":
		panic("grpclimit test: the handler panics, as asked")
	case what == "block":
		b.mu.Lock()
		g, stopped := b.gate, b.stopped
		b.mu.Unlock()
		if !stopped {
			b.entered <- struct{}{}
			<-g
		}
		return false, nil
	case strings.HasPrefix(what, "code:"):
		n, _ := strconv.Atoi(strings.TrimPrefix(what, "code:"))
		return true, status.Error(codes.Code(n), "as asked")
	}
	return false, nil
}

// open lets the blocked calls go on; later ones block again unless stop.
func (b *behaviour) open(stop bool) {
	b.mu.Lock()
	close(b.gate)
	b.gate = make(chan struct{})
	b.stopped = b.stopped || stop
	b.mu.Unlock()
}

func (b *behaviour) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if done, err := b.act(ctx); done {
		return nil, err
	}
	return handler(ctx, req)
}

func (b *behaviour) stream(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
	_, err := b.act(ss.Context())
	return err
}

// serveHolds starts n servers on one redis-server, each: recovery, then
// the limiter deciding with opts on a Redis client of its own, then b.
func serveHolds(t *testing.T, addr string, n int, b *behaviour, opts ...httplimit.Option) []healthpb.HealthClient {
	t.Helper()
	var clients []healthpb.HealthClient
	for range n {
		i := mustInterceptor(t, adaptertest.RedisLimiter(t, addr), opts)
		clients = append(clients, serveHealth(t,
			grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(recovered), i.Unary(), b.unary),
			grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(recovered), i.Stream(), b.stream)))
	}
	return clients
}

// recovered answers a recovered panic with Internal.
var recovered = recovery.WithRecoveryHandler(func(p any) error { return status.Errorf(codes.Internal, "panic: %v", p) })

func behave(ctx context.Context, what string) context.Context {
	if what == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "x-behave", what)
}

var logins = ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 5, Period: time.Hour}

// WithCountIf(Failed) on three servers sharing a redis-server: 20 OK
// calls consume nothing (each reserved 1 of 5 and gave it back), 5
// Unauthenticated calls count, and the 6th call is denied without
// reaching the handler, whatever it would answer.
func TestUnaryCountIfLogins(t *testing.T) {
	b := newBehaviour()
	clients := serveHolds(t, testredis.Start(t).Addr, 3, b, httplimit.WithLimits(logins), httplimit.WithCountIf(httplimit.Failed))
	ctx := callCtx(t)
	for n := range 20 {
		var header metadata.MD
		if _, err := clients[n%3].Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header)); err != nil || first(header, "x-ratelimit-remaining") != "4" {
			t.Fatalf("success %d: %v, x-ratelimit-remaining %q; want OK and 4", n, err, first(header, "x-ratelimit-remaining"))
		}
	}
	failed := behave(ctx, "code:"+strconv.Itoa(int(codes.Unauthenticated)))
	for n := range 5 {
		if _, err := clients[n%3].Check(failed, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("failure %d: %v; want Unauthenticated", n, err)
		}
	}
	_, err := clients[0].Check(failed, &healthpb.HealthCheckRequest{})
	checkDenied(t, "the 6th failure", err, logins.String())
	_, err = clients[1].Check(ctx, &healthpb.HealthCheckRequest{})
	checkDenied(t, "a success after 5 failures", err, logins.String())
	if b.ran.Load() != 25 {
		t.Errorf("the handler ran %d times; want 25", b.ran.Load())
	}
}

// The call's code reaches the CountFunc: by its HTTP status, and exactly
// through Code. Counting PermissionDenied only, InvalidArgument and
// FailedPrecondition (both 400) and OK cost nothing; 5 PermissionDenied
// block the key.
func TestCountFuncSeesCode(t *testing.T) {
	var mu sync.Mutex
	seen := map[codes.Code]int{}
	count := func(r *http.Request, st int) bool {
		c, ok := grpclimit.Code(r)
		if !ok || st != grpclimit.HTTPStatus(c) {
			t.Errorf("CountFunc: Code %v %v, status %d", c, ok, st)
		}
		mu.Lock()
		seen[c]++
		mu.Unlock()
		return c == codes.PermissionDenied
	}
	b := newBehaviour()
	c := serveHolds(t, testredis.Start(t).Addr, 1, b, httplimit.WithLimits(logins), httplimit.WithCountIf(count))[0]
	ctx := callCtx(t)
	for range 3 {
		for _, code := range []codes.Code{codes.OK, codes.InvalidArgument, codes.FailedPrecondition} {
			if _, err := c.Check(behave(ctx, "code:"+strconv.Itoa(int(code))), &healthpb.HealthCheckRequest{}); status.Code(err) != code {
				t.Fatalf("%v: %v", code, err)
			}
		}
	}
	denied := behave(ctx, "code:"+strconv.Itoa(int(codes.PermissionDenied)))
	for n := range 5 {
		if _, err := c.Check(denied, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("PermissionDenied %d: %v", n, err)
		}
	}
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	checkDenied(t, "after 5 PermissionDenied", err, logins.String())
	mu.Lock()
	defer mu.Unlock()
	if seen[codes.OK] != 3 || seen[codes.InvalidArgument] != 3 || seen[codes.FailedPrecondition] != 3 || seen[codes.PermissionDenied] != 5 {
		t.Errorf("codes the CountFunc saw: %v", seen)
	}
}

// wave starts n calls (call) that block in the handler, and waits until
// min(n, limit) are in it and the rest were denied; then it opens the gate
// and returns the codes of all n.
func wave(t *testing.T, b *behaviour, n, limit int, call func(i int) error) map[codes.Code]int {
	t.Helper()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs <- call(i) })
	}
	defer wg.Wait()
	got := map[codes.Code]int{}
	entered, deadline := 0, time.After(time.Minute)
	for entered < min(n, limit) || got[codes.ResourceExhausted] < n-limit {
		select {
		case <-b.entered:
			entered++
		case err := <-errs:
			got[status.Code(err)]++
			if status.Code(err) != codes.ResourceExhausted || got[codes.ResourceExhausted] > n-limit {
				b.open(true)
				t.Fatalf("a call ended with %v while %d were in the handler; want ResourceExhausted for the %d over %d in flight", err, entered, max(n-limit, 0), limit)
			}
		case <-deadline:
			b.open(true)
			t.Fatalf("after a minute %d calls are in the handler and %v ended; want %d in, the rest denied", entered, got, limit)
		}
	}
	if len(b.entered) != 0 {
		t.Errorf("a call entered the handler with %d in flight", limit)
	}
	b.open(false)
	for range n - got[codes.ResourceExhausted] {
		got[status.Code(<-errs)]++
	}
	return got
}

// heldAfter asserts that no permit of key is held: a new one is the only.
func heldAfter(t *testing.T, addr string, key *atomic.Value, ttl time.Duration) {
	t.Helper()
	k, _ := key.Load().(string)
	if k == "" {
		t.Fatal("no denial reported its key")
	}
	p, err := adaptertest.RedisLimiter(t, addr).Acquire(context.Background(), k, 1, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Release(context.Background()) }()
	if !p.Acquired || p.Held != 1 {
		t.Errorf("after every call ended, a permit of %q: acquired %v, %d held; want nothing else held", k, p.Acquired, p.Held)
	}
}

// WithMaxInFlight(3) on three servers: of 6 unary calls blocking in the
// handler exactly 3 enter it; once they end a second wave of 3 enters at
// once; streams hold their permit until their handler returns, the same
// way; and no permit is left held.
func TestMaxInFlight(t *testing.T) {
	srv := testredis.Start(t)
	b := newBehaviour()
	var key atomic.Value
	const ttl = 30 * time.Second
	clients := serveHolds(t, srv.Addr, 3, b, httplimit.WithLimits(ratewarden.PerHour(1000)), httplimit.WithMaxInFlight(3, ttl),
		httplimit.WithOnLimit(func(_ *http.Request, info httplimit.Info) { key.Store(info.Key) }))
	ctx := behave(callCtx(t), "block")
	unary := func(i int) error {
		_, err := clients[i%3].Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	stream := func(i int) error {
		s, err := clients[i%3].Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		if errors.Is(err, io.EOF) {
			return nil // the stream ended OK
		}
		return err
	}
	if got := wave(t, b, 6, 3, unary); got[codes.OK] != 3 || got[codes.ResourceExhausted] != 3 {
		t.Errorf("first unary wave %v; want 3 OK, 3 denied", got)
	}
	if got := wave(t, b, 3, 3, unary); got[codes.OK] != 3 {
		t.Errorf("second unary wave %v; want 3 OK: the permits must be released", got)
	}
	if got := wave(t, b, 5, 3, stream); got[codes.OK] != 3 || got[codes.ResourceExhausted] != 2 {
		t.Errorf("stream wave %v; want 3 OK, 2 denied", got)
	}
	if got := wave(t, b, 3, 3, unary); got[codes.OK] != 3 {
		t.Errorf("unary wave after the streams %v; want 3 OK", got)
	}
	heldAfter(t, srv.Addr, &key, ttl)
}

// A panicking handler (unary or stream) counts, releases its permit, and
// reaches the recovery interceptor: Internal to the client; the 5th
// panic exhausts the limit.
func TestPanicCounts(t *testing.T) {
	b := newBehaviour()
	clients := serveHolds(t, testredis.Start(t).Addr, 3, b, httplimit.WithLimits(logins),
		httplimit.WithCountIf(httplimit.Failed), httplimit.WithMaxInFlight(1, 30*time.Second))
	ctx := callCtx(t)
	panics := behave(ctx, "panic")
	for n := range 5 {
		var err error
		if n%2 == 0 {
			_, err = clients[n%3].Check(panics, &healthpb.HealthCheckRequest{})
		} else if s, serr := clients[n%3].Watch(panics, &healthpb.HealthCheckRequest{}); serr != nil {
			err = serr
		} else {
			_, err = s.Recv()
		}
		if status.Code(err) != codes.Internal {
			t.Fatalf("panic %d: %v; want Internal from the recovery interceptor", n+1, err)
		}
		var header metadata.MD
		_, err = clients[(n+1)%3].Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		switch {
		case n < 4 && (err != nil || first(header, "x-ratelimit-remaining") != strconv.Itoa(3-n)):
			t.Fatalf("the call after panic %d: %v, x-ratelimit-remaining %q; want OK and %d (each panic counted, its permit released)", n+1, err, first(header, "x-ratelimit-remaining"), 3-n)
		case n == 4:
			checkDenied(t, "the call after 5 panics", err, logins.String())
		}
	}
}

// Through go-grpc-middleware's ratelimit interceptor, Limit holds what
// the call holds until the call's context ends: a blocked call keeps its
// permit, so a second is denied; after it the permit is released (soon:
// the server ends the context after the call), and the call counted.
func TestLimitHoldsUntilCallEnds(t *testing.T) {
	srv := testredis.Start(t)
	b := newBehaviour()
	var key atomic.Value
	const ttl = 5 * time.Minute // far beyond the wait below: only a release frees it
	i := mustInterceptor(t, adaptertest.RedisLimiter(t, srv.Addr), []httplimit.Option{httplimit.WithLimits(adaptertest.PerHour), httplimit.WithMaxInFlight(1, ttl),
		httplimit.WithOnLimit(func(_ *http.Request, info httplimit.Info) { key.Store(info.Key) })})
	c := serveHealth(t, grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(i), b.unary))
	ctx := callCtx(t)
	if got := wave(t, b, 2, 1, func(int) error {
		_, err := c.Check(behave(ctx, "block"), &healthpb.HealthCheckRequest{})
		return err
	}); got[codes.OK] != 1 || got[codes.ResourceExhausted] != 1 {
		t.Errorf("codes %v; want one in, one denied", got)
	}
	k, _ := key.Load().(string)
	lim := adaptertest.RedisLimiter(t, srv.Addr)
	testredis.WaitFor(t, time.Minute, func() string {
		p, err := lim.Acquire(context.Background(), k, 1, ttl)
		if err != nil {
			return err.Error()
		}
		defer func() { _ = p.Release(context.Background()) }()
		if !p.Acquired {
			return fmt.Sprintf("the permit of %q is still held", k)
		}
		return ""
	})
}

// HTTPStatus follows google.rpc.Code's mapping; CodeOf reads errors as
// the gRPC server does.
func TestHTTPStatusAndCodeOf(t *testing.T) {
	want := map[codes.Code]int{
		codes.OK: 200, codes.Canceled: 499, codes.Unknown: 500, codes.InvalidArgument: 400,
		codes.DeadlineExceeded: 504, codes.NotFound: 404, codes.AlreadyExists: 409,
		codes.PermissionDenied: 403, codes.ResourceExhausted: 429, codes.FailedPrecondition: 400,
		codes.Aborted: 409, codes.OutOfRange: 400, codes.Unimplemented: 501, codes.Internal: 500,
		codes.Unavailable: 503, codes.DataLoss: 500, codes.Unauthenticated: 401, codes.Code(99): 500,
	}
	for c, w := range want {
		if got := grpclimit.HTTPStatus(c); got != w {
			t.Errorf("HTTPStatus(%v) = %d; want %d", c, got, w)
		}
	}
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{status.Error(codes.Unauthenticated, "no"), codes.Unauthenticated},
		{context.Canceled, codes.Canceled},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{errors.New("plain"), codes.Unknown},
	} {
		if got := grpclimit.CodeOf(tc.err); got != tc.want {
			t.Errorf("CodeOf(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
	if _, ok := grpclimit.Code(grpclimit.Request(context.Background(), "/a/b")); ok {
		t.Error("Code of a view never decided reports ok")
	}
}
