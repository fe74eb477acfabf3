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
// Under httplimit.WithCountIf and WithMaxInFlight a call holds its
// reservation and permit while its handler runs (a stream's until its
// handler returns), and Unary and Stream end them with the HTTP status of
// the call's code (HTTPStatus: OK 200, InvalidArgument 400,
// Unauthenticated 401, PermissionDenied 403, ResourceExhausted 429, ...),
// so that httplimit.Failed counts every code but OK; a CountFunc finds
// the code itself with Code. A handler that panics counts (a recovery
// interceptor, if used, goes before the limiter's). Limit cannot see the
// call end: see its doc.
//
// The module is separate from ratewarden's, so that the library's users
// never inherit gRPC.
package grpclimit

import (
	"context"
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

	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/httplimit/adapterkit"
)

// A DeniedFunc returns the error for a call over the limit; the trailer
// with the rate limit headers is set when it is called.
type DeniedFunc func(ctx context.Context, info httplimit.Info) error

// An ErrorFunc returns the error for a call that could not be decided;
// err is as httplimit.ErrorFunc describes it (never send its text).
type ErrorFunc func(ctx context.Context, err error) error

// An Option configures an Interceptor.
type Option = adapterkit.Option[context.Context, DeniedFunc, ErrorFunc, settings]

type config = adapterkit.Config[context.Context, DeniedFunc, ErrorFunc, settings]

// settings are this package's own, beside the handlers.
type settings struct{ headers bool }

// WithDeniedHandler replaces the error of a call over the limit; default
// DeniedStatus(info).Err().
func WithDeniedHandler(fn DeniedFunc) Option { return func(c *config) { c.Denied = fn } }

// WithErrorHandler replaces the error of a call that could not be
// decided; default ErrorStatus(err).Err().
func WithErrorHandler(fn ErrorFunc) Option { return func(c *config) { c.Error = fn } }

// WithMetadata turns the rate limit metadata (header and trailer) on or
// off; default on. httplimit.WithHeaders selects which fields there are.
func WithMetadata(on bool) Option { return func(c *config) { c.Settings.headers = on } }

// Interceptor limits the calls of a gRPC server. Make it with New; it is
// safe for concurrent use.
type Interceptor struct {
	mw  *httplimit.Middleware
	cfg config
}

// New returns an Interceptor deciding with mw. A nil mw or Option, or an
// option given nil, is an error wrapping ratewarden.ErrInvalidConfig.
func New(mw *httplimit.Middleware, opts ...Option) (*Interceptor, error) {
	c, err := adapterkit.Configure("grpclimit", mw, config{Denied: deniedError, Error: errorError, Settings: settings{headers: true}}, opts)
	if err != nil {
		return nil, err
	}
	return &Interceptor{mw: mw, cfg: c}, nil
}

func deniedError(_ context.Context, info httplimit.Info) error { return DeniedStatus(info).Err() }

func errorError(_ context.Context, err error) error { return ErrorStatus(err).Err() }

// Unary returns the unary server interceptor: it decides each call before
// the handler runs, and runs it only when the call may proceed.
//
// Under httplimit.WithCountIf and WithMaxInFlight the call holds its
// reservation and permit while the handler runs; when it returns they
// are ended with the HTTP status of the call's code (see HTTPStatus; Code
// gives a CountFunc the code itself): the reservation is kept when the
// CountFunc counts it and given back otherwise, the permit released. A
// handler that panics ends them with status 0, which counts, and the
// panic goes on (to a recovery interceptor, say).
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		set := func(md metadata.MD, trailer bool) {
			if trailer {
				_ = grpc.SetTrailer(ctx, md)
			} else {
				_ = grpc.SetHeader(ctx, md)
			}
		}
		v, cell, err := i.decide(ctx, info.FullMethod, set)
		if err != nil {
			return nil, err
		}
		returned := false
		defer func() { finish(v, cell, returned, err) }()
		resp, err = handler(ctx, req)
		returned = true
		return resp, err
	}
}

// Stream returns the stream server interceptor: it decides each stream
// once, when it opens (one unit, whatever the number of messages), and
// ends what the stream holds when its handler returns, as Unary does.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		set := func(md metadata.MD, trailer bool) {
			if trailer {
				ss.SetTrailer(md)
			} else {
				_ = ss.SetHeader(md)
			}
		}
		v, cell, err := i.decide(ss.Context(), info.FullMethod, set)
		if err != nil {
			return err
		}
		returned := false
		defer func() { finish(v, cell, returned, err) }()
		err = handler(srv, ss)
		returned = true
		return err
	}
}

// finish ends v once its handler returned err, or panicked (returned
// false: status 0, which counts; it does not recover, so the panic goes
// on).
func finish(v httplimit.Verdict, cell *callCode, returned bool, err error) {
	if !returned {
		v.Done(0)
		return
	}
	c := CodeOf(err)
	cell.code, cell.set = c, true
	v.Done(HTTPStatus(c))
}

// Limit decides the call of the server context ctx (its method from
// grpc.Method) and returns nil when it may proceed: an Interceptor is a
// ratelimit.Limiter of go-grpc-middleware/v2, whose interceptors answer a
// non-nil error with ResourceExhausted and this error's text in the
// message (its details, RetryInfo among them, are dropped there: Unary and
// Stream keep them). The metadata is set as Unary sets it.
//
// Limit does not see the call end: under httplimit.WithCountIf and
// WithMaxInFlight, what an admitted call holds is ended with status 0
// when ctx is done, which the gRPC server does once the call has
// finished: its reservation always counts, and its permit is held until
// then. Use Unary and Stream to settle by the call's code.
func (i *Interceptor) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	v, _, err := i.decide(ctx, method, func(md metadata.MD, trailer bool) {
		if trailer {
			_ = grpc.SetTrailer(ctx, md)
		} else {
			_ = grpc.SetHeader(ctx, md)
		}
	})
	if err != nil {
		return err
	}
	v.DoneAfter(ctx)
	return nil
}

// callCode is where Unary and Stream leave the code a call ended with,
// for Code: the request httplimit decides on carries it in its context.
// It is written before Verdict.Done, which calls the CountFunc, on the
// same goroutine.
type callCode struct {
	code codes.Code
	set  bool
}

type callCodeKey struct{}

// Code reports the gRPC code of the call r is the view of, once its
// handler has returned, for a CountFunc of httplimit.WithCountIf on an
// Interceptor's middleware: ok is false before, after a panic (status
// 0), and for a request that is no view of a call or whose call Limit
// decided. With it a CountFunc can tell apart codes that HTTPStatus maps
// to one status, e.g. counting Unauthenticated and PermissionDenied
// only:
//
//	count := func(r *http.Request, status int) bool {
//		c, ok := grpclimit.Code(r)
//		return !ok || c == codes.Unauthenticated || c == codes.PermissionDenied
//	}
func Code(r *http.Request) (c codes.Code, ok bool) {
	cell, _ := r.Context().Value(callCodeKey{}).(*callCode)
	if cell == nil || !cell.set {
		return codes.Unknown, false
	}
	return cell.code, true
}

// CodeOf is the code a handler's error ends its call with, as the gRPC
// server sends it: OK for nil, the code of a status error, Canceled or
// DeadlineExceeded for the context's errors, Unknown for any other.
func CodeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return status.FromContextError(err).Code()
}

// HTTPStatus is the HTTP status Unary and Stream settle a call's code
// with under httplimit.WithCountIf, the status its CountFunc is given:
// the mapping google.rpc.Code documents (and gRPC-HTTP gateways use), so
// that httplimit.Failed counts every code but OK:
//
//	OK 200, Canceled 499, Unknown 500, InvalidArgument 400,
//	DeadlineExceeded 504, NotFound 404, AlreadyExists 409,
//	PermissionDenied 403, ResourceExhausted 429, FailedPrecondition 400,
//	Aborted 409, OutOfRange 400, Unimplemented 501, Internal 500,
//	Unavailable 503, DataLoss 500, Unauthenticated 401;
//
// any other code 500.
func HTTPStatus(c codes.Code) int {
	if int(c) < len(httpStatus) {
		return httpStatus[c]
	}
	return http.StatusInternalServerError
}

var httpStatus = [...]int{
	codes.OK:                 http.StatusOK,
	codes.Canceled:           499, // nginx's Client Closed Request, as gateways use it
	codes.Unknown:            http.StatusInternalServerError,
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.DeadlineExceeded:   http.StatusGatewayTimeout,
	codes.NotFound:           http.StatusNotFound,
	codes.AlreadyExists:      http.StatusConflict,
	codes.PermissionDenied:   http.StatusForbidden,
	codes.ResourceExhausted:  http.StatusTooManyRequests,
	codes.FailedPrecondition: http.StatusBadRequest,
	codes.Aborted:            http.StatusConflict,
	codes.OutOfRange:         http.StatusBadRequest,
	codes.Unimplemented:      http.StatusNotImplemented,
	codes.Internal:           http.StatusInternalServerError,
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.DataLoss:           http.StatusInternalServerError,
	codes.Unauthenticated:    http.StatusUnauthorized,
}

// decide decides the call; the error is nil when it may proceed, and
// then the verdict holds what the call holds, and the cell is where its
// code goes. set sends the rate limit metadata (in the trailer when the
// call is denied).
func (i *Interceptor) decide(ctx context.Context, method string, set func(md metadata.MD, trailer bool)) (httplimit.Verdict, *callCode, error) {
	cell := &callCode{}
	v := i.mw.Decide(Request(context.WithValue(ctx, callCodeKey{}, cell), method))
	switch {
	case v.Canceled:
		return v, nil, status.FromContextError(ctx.Err()).Err()
	case v.Err != nil && !v.Proceed:
		return v, nil, i.cfg.Error(ctx, v.Err)
	}
	if i.cfg.Settings.headers {
		if fields := v.AppendFields(nil); len(fields) > 0 {
			md := make(metadata.MD, len(fields))
			for _, f := range fields {
				md[strings.ToLower(f.Name)] = []string{f.Value}
			}
			set(md, !v.Proceed)
		}
	}
	if v.Proceed {
		return v, cell, nil
	}
	return v, nil, i.cfg.Denied(ctx, v.Info)
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
