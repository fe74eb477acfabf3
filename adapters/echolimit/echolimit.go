// Package echolimit rate limits echo (v4) routes with an
// httplimit.Middleware: the same rules, plans, keys, headers and counters
// as the net/http middleware, answered the echo way.
//
//	mw, err := httplimit.New(lim, httplimit.WithLimits(ratewarden.PerMinute(100)))
//	if err != nil {
//		return err
//	}
//	el, err := echolimit.New(mw)
//	if err != nil {
//		return err
//	}
//	e.Use(el.Handler())
//
// Every httplimit option applies (WithKey, WithRule, WithLimitFunc,
// WithShadow, WithFailClosed, ...) except WithDeniedHandler and
// WithErrorHandler, whose place those of this package take. A request
// over the limit returns, after the rate limit headers, an
// *echo.HTTPError of status 429 whose Message is httplimit's RFC 9457
// problem and whose Internal is a *DeniedError: echo's default error
// handler writes the problem as JSON (with Content-Type
// application/problem+json, set beforehand), and a custom one can find
// the decision with errors.As. A request that could not be decided
// returns an *echo.HTTPError of 400 or 503 with httplimit.ErrorProblem as
// Message and the cause as Internal (for logs; never sent). The request
// httplimit sees carries echo's route as its Pattern ("GET /users/:id"),
// so httplimit.Pattern keys by route.
//
// The module is separate from ratewarden's, so that the library's users
// never inherit echo.
package echolimit

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// DeniedError is the Internal error of the *echo.HTTPError a request over
// the limit returns: the middleware's decision.
type DeniedError struct {
	Info httplimit.Info
}

func (e *DeniedError) Error() string {
	return "echolimit: rate limit exceeded: rule " + e.Info.Rule
}

// A DeniedFunc returns the error (or writes the response and returns nil)
// for a request over the limit; the rate limit headers and Retry-After
// are set when it is called.
type DeniedFunc func(c echo.Context, info httplimit.Info) error

// An ErrorFunc returns the error for a request that could not be decided;
// err is as httplimit.ErrorFunc describes it (never send its text).
type ErrorFunc func(c echo.Context, err error) error

// An Option configures a Middleware.
type Option func(*config)

type config struct {
	denied DeniedFunc
	onErr  ErrorFunc
}

// WithDeniedHandler replaces the answer to a request over the limit;
// default Denied.
func WithDeniedHandler(fn DeniedFunc) Option { return func(c *config) { c.denied = fn } }

// WithErrorHandler replaces the answer to a request that could not be
// decided; default Error.
func WithErrorHandler(fn ErrorFunc) Option { return func(c *config) { c.onErr = fn } }

// Middleware is echo middleware deciding with an httplimit.Middleware.
// Make it with New; it is safe for concurrent use.
type Middleware struct {
	mw     *httplimit.Middleware
	denied DeniedFunc
	onErr  ErrorFunc
}

// New returns echo middleware deciding with mw. A nil mw or Option, or an
// option given nil, is an error wrapping ratewarden.ErrInvalidConfig.
func New(mw *httplimit.Middleware, opts ...Option) (*Middleware, error) {
	if mw == nil {
		return nil, fmt.Errorf("echolimit: middleware must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	c := config{denied: Denied, onErr: Error}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("echolimit: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	switch {
	case c.denied == nil:
		return nil, fmt.Errorf("echolimit: WithDeniedHandler: handler must not be nil: %w", ratewarden.ErrInvalidConfig)
	case c.onErr == nil:
		return nil, fmt.Errorf("echolimit: WithErrorHandler: handler must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	return &Middleware{mw: mw, denied: c.denied, onErr: c.onErr}, nil
}

// Handler returns the echo.MiddlewareFunc: it decides each request as
// httplimit's Handler does, sets the same headers, and calls next for a
// request that may proceed; otherwise it returns the denied or error
// handler's answer.
func (m *Middleware) Handler() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if ok, err := m.answer(c, m.mw.Decide(request(c))); !ok {
				return err
			}
			return next(c)
		}
	}
}

// Check applies the rule the request matches to key, as
// httplimit.Middleware.Check does, from inside an echo handler. It
// reports whether the handler should go on; when not, the handler returns
// err: the denied or error handler's answer (nil when the client went
// away and nobody waits for one).
func (m *Middleware) Check(c echo.Context, key string) (ok bool, err error) {
	return m.answer(c, m.mw.DecideKey(request(c), key))
}

func (m *Middleware) answer(c echo.Context, v httplimit.Verdict) (bool, error) {
	switch {
	case v.Canceled:
		return false, nil // the client went away: nobody reads an answer
	case v.Err != nil && !v.Proceed:
		return false, m.onErr(c, v.Err)
	}
	v.SetHeaders(c.Response().Header())
	if v.Proceed {
		return true, nil
	}
	return false, m.denied(c, v.Info)
}

// request is the request httplimit decides on: echo's, with the matched
// route as its Pattern when it has none.
func request(c echo.Context) *http.Request {
	r := c.Request()
	if r.Pattern == "" && c.Path() != "" {
		r = r.WithContext(r.Context())
		r.Pattern = r.Method + " " + c.Path()
	}
	return r
}

// Denied is the default DeniedFunc: an *echo.HTTPError of 429 with
// httplimit.DeniedProblem as Message and a *DeniedError as Internal, and
// Content-Type application/problem+json set for echo's error handler.
func Denied(c echo.Context, info httplimit.Info) error {
	p := httplimit.DeniedProblem(info)
	problemHeaders(c)
	return &echo.HTTPError{Code: p.Status, Message: p, Internal: &DeniedError{Info: info}}
}

// Error is the default ErrorFunc: an *echo.HTTPError with
// httplimit.ErrorProblem (400 or 503, a fixed detail) as Message and err
// as Internal.
func Error(c echo.Context, err error) error {
	p := httplimit.ErrorProblem(err)
	problemHeaders(c)
	return &echo.HTTPError{Code: p.Status, Message: p, Internal: err}
}

func problemHeaders(c echo.Context) {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/problem+json") // echo's JSON keeps a Content-Type already set
	h.Set("Cache-Control", "no-store")
}
