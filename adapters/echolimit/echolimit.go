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
// Under httplimit.WithCountIf and WithMaxInFlight a request holds its
// reservation and permit while next runs, and Handler ends them with the
// status the request is answered with (0 after a panic, which counts:
// middleware.Recover, if used, goes before Handler). A handler's error is
// answered by echo's error handler from inside Handler, so that the
// status counted is the one sent (WithHandleError; Status is the status
// inferred without it). A route limited by Check alone (the user name of
// a login form) puts Settle in front, so that its check is settled by
// the outcome too.
//
// The module is separate from ratewarden's, so that the library's users
// never inherit echo.
package echolimit

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/httplimit/adapterkit"
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
type Option = adapterkit.Option[echo.Context, DeniedFunc, ErrorFunc, settings]

type config = adapterkit.Config[echo.Context, DeniedFunc, ErrorFunc, settings]

// settings are this package's own, beside the handlers.
type settings struct{ handleError bool }

// WithDeniedHandler replaces the answer to a request over the limit;
// default Denied.
func WithDeniedHandler(fn DeniedFunc) Option { return func(c *config) { c.Denied = fn } }

// WithErrorHandler replaces the answer to a request that could not be
// decided; default Error.
func WithErrorHandler(fn ErrorFunc) Option { return func(c *config) { c.Error = fn } }

// WithHandleError decides how Handler learns the status of a request
// whose handler returned an error, which WithCountIf's CountFunc is
// given; default true. With true, as echo's RequestLogger with
// HandleError, Handler calls c.Error(err) (echo's HTTPErrorHandler, which
// writes the response) unless the response is committed already, counts
// the status written, and still returns err, which echo's
// DefaultHTTPErrorHandler then ignores (a custom one should skip a
// committed response too); middleware before Handler can no longer
// change that response. With false the response is left to echo as
// usual and the status is the one Status infers, which is right for
// DefaultHTTPErrorHandler but not for a custom error handler that maps
// errors to statuses of its own.
func WithHandleError(on bool) Option { return func(c *config) { c.Settings.handleError = on } }

// Middleware is echo middleware deciding with an httplimit.Middleware.
// Make it with New; it is safe for concurrent use.
type Middleware struct {
	mw  *httplimit.Middleware
	cfg config
}

// New returns echo middleware deciding with mw. A nil mw or Option, or an
// option given nil, is an error wrapping ratewarden.ErrInvalidConfig.
func New(mw *httplimit.Middleware, opts ...Option) (*Middleware, error) {
	c, err := adapterkit.Configure("echolimit", mw, config{Denied: Denied, Error: Error, Settings: settings{handleError: true}}, opts)
	if err != nil {
		return nil, err
	}
	return &Middleware{mw: mw, cfg: c}, nil
}

// Handler returns the echo.MiddlewareFunc: it decides each request as
// httplimit's Handler does, sets the same headers, and calls next for a
// request that may proceed; otherwise it returns the denied or error
// handler's answer.
//
// Under httplimit.WithCountIf and WithMaxInFlight the request holds its
// reservation and permit while next runs; when next returns they are
// ended with the status the request is answered with (see
// WithHandleError), the reservation kept when the CountFunc counts that
// status and given back otherwise, the permit released. A handler that
// panics ends them with status 0, which counts, and the panic goes on
// (to middleware.Recover, say). Checks made by Check beneath the Handler
// are ended the same way, at the same time.
func (m *Middleware) Handler() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			v := m.mw.Decide(request(c))
			if ok, err := m.answer(c, v); !ok {
				v.Done(0) // holds nothing: a no-op, as Done asks
				return err
			}
			return m.next(c, next, &v)
		}
	}
}

// Settle returns echo middleware that ends the holds of the checks Check
// of m makes in the handlers after it (under httplimit.WithCountIf and
// WithMaxInFlight), as Handler does, without deciding anything itself:
// for routes limited by Check alone, a login by user name, say.
//
//	e.POST("/login", login, el.Settle())
func (m *Middleware) Settle() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return m.next(c, next, nil) }
	}
}

// scopeKey is the echo.Context key of the innermost scope: the verdicts
// Check made beneath a Handler or Settle, ended when its next returns.
const scopeKey = "github.com/ratewarden/ratewarden/adapters/echolimit.scope"

type scope struct{ held []httplimit.Verdict }

// next runs next in a scope of its own, then ends v (when not nil) and
// the scope's verdicts with the final status; 0 when next panicked. The
// deferred call does not recover: the panic goes on.
func (m *Middleware) next(c echo.Context, next echo.HandlerFunc, v *httplimit.Verdict) (err error) {
	outer := c.Get(scopeKey)
	sc := &scope{}
	c.Set(scopeKey, sc)
	status := 0
	defer func() {
		c.Set(scopeKey, outer) // a later Check belongs to the outer scope, if any
		for _, h := range sc.held {
			h.Done(status)
		}
		if v != nil {
			v.Done(status)
		}
	}()
	err = next(c)
	if err != nil && m.cfg.Settings.handleError && !c.Response().Committed {
		c.Error(err)
	}
	status = Status(c, err)
	return err
}

// Status is the status of the response to c once its handler returned
// err: the status written when the response is committed; otherwise 200
// for a nil err (net/http's answer when nothing was written), and for an
// error the one echo's DefaultHTTPErrorHandler writes for it (the code of
// an *echo.HTTPError, or of an *echo.HTTPError as its Internal; 500 for
// any other error).
func Status(c echo.Context, err error) int {
	switch res := c.Response(); {
	case res.Committed:
		return res.Status
	case err == nil:
		return http.StatusOK
	}
	he, ok := err.(*echo.HTTPError) // as DefaultHTTPErrorHandler: not errors.As
	if !ok {
		return http.StatusInternalServerError
	}
	if in, ok := he.Internal.(*echo.HTTPError); ok {
		he = in
	}
	return he.Code
}

// Check applies the rule the request matches to key, as
// httplimit.Middleware.Check does, from inside an echo handler. It
// reports whether the handler should go on; when not, the handler returns
// err: the denied or error handler's answer (nil when the client went
// away and nobody waits for one).
//
// Under httplimit.WithCountIf and WithMaxInFlight, what a check that
// goes on holds is ended by the innermost Handler or Settle of this
// package that runs the handler, once it returns, with its final status:
// put one in front of routes that call Check. Without one the check is
// ended when the request's context is done, with status 0: its
// reservation counts whatever the answer, its permit is held until the
// request has been served.
func (m *Middleware) Check(c echo.Context, key string) (ok bool, err error) {
	v := m.mw.DecideKey(request(c), key)
	if ok, err = m.answer(c, v); !ok {
		v.Done(0) // holds nothing
		return false, err
	}
	if sc, _ := c.Get(scopeKey).(*scope); sc != nil {
		sc.held = append(sc.held, v)
		return true, nil
	}
	v.DoneAfter(c.Request().Context())
	return true, nil
}

func (m *Middleware) answer(c echo.Context, v httplimit.Verdict) (bool, error) {
	switch {
	case v.Canceled:
		return false, nil // the client went away: nobody reads an answer
	case v.Err != nil && !v.Proceed:
		return false, m.cfg.Error(c, v.Err)
	}
	v.SetHeaders(c.Response().Header())
	if v.Proceed {
		return true, nil
	}
	return false, m.cfg.Denied(c, v.Info)
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
