// Package grpclimit rate limits gRPC servers with an httplimit.Middleware:
// unary and stream server interceptors with the same rules, plans, keys
// and counters as the net/http middleware, and a Limit method that makes
// an Interceptor a go-grpc-middleware/v2 ratelimit.Limiter.
//
//	mw, err := httplimit.New(lim, httplimit.WithLimits(ratewarden.PerMinute(100)))
//	if err != nil {
//		return err
//	}
//	rl, err := grpclimit.New(mw)
//	if err != nil {
//		return err
//	}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(rl.Unary()),
//		grpc.ChainStreamInterceptor(rl.Stream()))
//
// Each call is decided on a view of it as an HTTP request: method POST,
// URL path and Pattern the full method ("/pkg.Service/Method"), the
// incoming metadata as headers (":authority" as Host), and the peer's
// address as RemoteAddr. So httplimit's key functions work unchanged:
// the default ClientIP keys by peer address (reading x-forwarded-for
// metadata from trusted proxies), httplimit.Header("x-api-key") by a
// metadata value, httplimit.Pattern by method, and
// httplimit.Join(httplimit.Pattern, key) by method and client. A rule's
// Match can select methods by r.URL.Path. A peer that is not an IP address
// (a Unix socket) has no ClientIP key: give WithKey another key function.
//
// A call over the limit fails with codes.ResourceExhausted, a message
// naming the policy and the wait, and the details errdetails.RetryInfo
// (the wait, rounded up to whole seconds as Retry-After) and
// errdetails.QuotaFailure (the violated policies). The rate limit headers
// go out as metadata in lower case ("ratelimit-policy", "ratelimit",
// "x-ratelimit-remaining", ..., "retry-after"): in the header of an
// admitted call, in the trailer of a denied one. A call that could not be
// decided fails with InvalidArgument (no key, a bad cost) or Unavailable.
//
// The module is separate from ratewarden's, so that the library's users
// never inherit gRPC.
package grpclimit

import (
	"context"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// A DeniedFunc returns the error for a call over the limit; the trailer
// with the rate limit headers is set when it is called.
type DeniedFunc func(ctx context.Context, info httplimit.Info) error

// An ErrorFunc returns the error for a call that could not be decided;
// err is as httplimit.ErrorFunc describes it (never send its text).
type ErrorFunc func(ctx context.Context, err error) error

// An Option configures an Interceptor.
type Option func(*config)

type config struct {
	denied  DeniedFunc
	onErr   ErrorFunc
	headers bool
}

// WithDeniedHandler replaces the error of a call over the limit; default
// DeniedStatus(info).Err().
func WithDeniedHandler(fn DeniedFunc) Option { return func(c *config) { c.denied = fn } }

// WithErrorHandler replaces the error of a call that could not be
// decided; default ErrorStatus(err).Err().
func WithErrorHandler(fn ErrorFunc) Option { return func(c *config) { c.onErr = fn } }

// WithMetadata turns the rate limit metadata (header and trailer) on or
// off; default on. httplimit.WithHeaders selects which fields there are.
func WithMetadata(on bool) Option { return func(c *config) { c.headers = on } }

// Interceptor limits the calls of a gRPC server. Make it with New; it is
// safe for concurrent use.
type Interceptor struct {
	mw      *httplimit.Middleware
	denied  DeniedFunc
	onErr   ErrorFunc
	headers bool
}

// New returns an Interceptor deciding with mw. A nil mw or Option, or an
// option given nil, is an error wrapping ratewarden.ErrInvalidConfig.
func New(mw *httplimit.Middleware, opts ...Option) (*Interceptor, error) {
	if mw == nil {
		return nil, fmt.Errorf("grpclimit: middleware must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	c := config{denied: deniedError, onErr: errorError, headers: true}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("grpclimit: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	switch {
	case c.denied == nil:
		return nil, fmt.Errorf("grpclimit: WithDeniedHandler: handler must not be nil: %w", ratewarden.ErrInvalidConfig)
	case c.onErr == nil:
		return nil, fmt.Errorf("grpclimit: WithErrorHandler: handler must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	return &Interceptor{mw: mw, denied: c.denied, onErr: c.onErr, headers: c.headers}, nil
}

func deniedError(_ context.Context, info httplimit.Info) error { return DeniedStatus(info).Err() }

func errorError(_ context.Context, err error) error { return ErrorStatus(err).Err() }

// Unary returns the unary server interceptor: it decides each call before
// the handler runs, and runs it only when the call may proceed.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		set := func(md metadata.MD, trailer bool) {
			if trailer {
				_ = grpc.SetTrailer(ctx, md)
			} else {
				_ = grpc.SetHeader(ctx, md)
			}
		}
		if err := i.decide(ctx, info.FullMethod, set); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor: it decides each stream
// once, when it opens (one unit, whatever the number of messages).
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		set := func(md metadata.MD, trailer bool) {
			if trailer {
				ss.SetTrailer(md)
			} else {
				_ = ss.SetHeader(md)
			}
		}
		if err := i.decide(ss.Context(), info.FullMethod, set); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// Limit decides the call of the server context ctx (its method from
// grpc.Method) and returns nil when it may proceed: an Interceptor is a
// ratelimit.Limiter of go-grpc-middleware/v2, whose interceptors answer a
// non-nil error with ResourceExhausted and this error's text in the
// message (its details, RetryInfo among them, are dropped there: Unary and
// Stream keep them). The metadata is set as Unary sets it.
func (i *Interceptor) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	return i.decide(ctx, method, func(md metadata.MD, trailer bool) {
		if trailer {
			_ = grpc.SetTrailer(ctx, md)
		} else {
			_ = grpc.SetHeader(ctx, md)
		}
	})
}

// decide decides the call and returns nil when it may proceed; set sends
// the rate limit metadata (in the trailer when the call is denied).
func (i *Interceptor) decide(ctx context.Context, method string, set func(md metadata.MD, trailer bool)) error {
	v := i.mw.Decide(Request(ctx, method))
	switch {
	case v.Canceled:
		return status.FromContextError(ctx.Err()).Err()
	case v.Err != nil && !v.Proceed:
		return i.onErr(ctx, v.Err)
	}
	if i.headers {
		if fields := v.AppendFields(nil); len(fields) > 0 {
			md := make(metadata.MD, len(fields))
			for _, f := range fields {
				md[strings.ToLower(f.Name)] = []string{f.Value}
			}
			set(md, !v.Proceed)
		}
	}
	if v.Proceed {
		return nil
	}
	return i.denied(ctx, v.Info)
}

// Request returns the view of the call on ctx to method that httplimit
// decides on (see the package doc): for tests of key functions and rules.
func Request(ctx context.Context, method string) *http.Request {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
	if err != nil { // cannot happen: a constant method and URL
		r = (&http.Request{Method: http.MethodPost, Header: http.Header{}}).WithContext(ctx)
	}
	r.URL.Path, r.RequestURI, r.Pattern = method, method, method
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0
	md, _ := metadata.FromIncomingContext(ctx)
	for k, vs := range md {
		switch {
		case k == ":authority" && len(vs) > 0:
			r.Host = vs[0]
		case strings.HasPrefix(k, ":"):
		default:
			r.Header[textproto.CanonicalMIMEHeaderKey(k)] = vs
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
	}
	return r
}

// DeniedStatus is the status of a call over the limit, the default
// DeniedFunc's: codes.ResourceExhausted with httplimit.DeniedProblem's
// detail as message, errdetails.RetryInfo (the problem's retry_after, in
// whole seconds) and errdetails.QuotaFailure (one violation per violated
// policy).
func DeniedStatus(info httplimit.Info) *status.Status {
	p := httplimit.DeniedProblem(info)
	st := status.New(codes.ResourceExhausted, p.Detail)
	qf := &errdetails.QuotaFailure{}
	for _, name := range p.ViolatedPolicies {
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{Subject: "policy:" + name, Description: "rate limit " + name + " exceeded"})
	}
	ri := &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(p.RetryAfter) * time.Second)}
	if ds, err := st.WithDetails(ri, qf); err == nil {
		st = ds
	}
	return st
}

// ErrorStatus is the status of a call that could not be decided, the
// default ErrorFunc's: httplimit.ErrorProblem's fixed detail as message,
// with InvalidArgument for its 400 (no key, a bad cost) and Unavailable
// otherwise.
func ErrorStatus(err error) *status.Status {
	p := httplimit.ErrorProblem(err)
	code := codes.Unavailable
	if p.Status == http.StatusBadRequest {
		code = codes.InvalidArgument
	}
	return status.New(code, p.Detail)
}
