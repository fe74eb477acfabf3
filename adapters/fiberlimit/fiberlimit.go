// Package fiberlimit rate limits fiber (v2, on fasthttp) routes with an
// httplimit.Middleware: the same rules, plans, keys, headers and counters
// as the net/http middleware, answered the fiber way.
//
//	mw, err := httplimit.New(lim, httplimit.WithLimits(ratewarden.PerMinute(100)))
//	if err != nil {
//		return err
//	}
//	fl, err := fiberlimit.New(mw)
//	if err != nil {
//		return err
//	}
//	app.Use(fl.Handler())
//
// Each request is decided on its net/http view (fiber's adaptor), with
// the user context (c.UserContext) as its context and the TCP peer as
// RemoteAddr, so httplimit's key functions, rules and proxy checks work
// unchanged. The view lives for the call only: key functions must not
// keep it (httplimit's never do). It has no Pattern: fiber names the
// middleware's own route, not the handler's, while the middleware runs.
//
// Every httplimit option applies except WithDeniedHandler and
// WithErrorHandler, whose place those of this package take: by default a
// request over the limit gets, after the rate limit headers,
// c.Status(429).JSON(problem, "application/problem+json") with
// httplimit's RFC 9457 body; one that could not be decided its 400 or 503
// problem.
//
// Under httplimit.WithCountIf and WithMaxInFlight a request holds its
// reservation and permit while c.Next runs, and Handler ends them with
// the status the request is answered with (0 after a panic, which
// counts: the recover middleware, if used, goes before Handler). A
// handler's error is answered by the app's error handler from inside
// Handler, so that the status counted is the one sent (WithHandleError;
// Status is the status inferred without it). A route limited by Check
// alone (the user name of a login form) puts Settle in front, so that
// its check is settled by the outcome too.
//
// The module is separate from ratewarden's, so that the library's users
// never inherit fiber or fasthttp.
package fiberlimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/httplimit/adapterkit"
)

// A DeniedFunc answers a request over the limit; the rate limit headers
// and Retry-After are set when it is called. Its error goes to fiber's
// error handler.
type DeniedFunc func(c *fiber.Ctx, info httplimit.Info) error

// An ErrorFunc answers a request the middleware could not decide; err is
// as httplimit.ErrorFunc describes it (never send its text).
type ErrorFunc func(c *fiber.Ctx, err error) error

// An Option configures a Middleware.
type Option = adapterkit.Option[*fiber.Ctx, DeniedFunc, ErrorFunc, settings]

type config = adapterkit.Config[*fiber.Ctx, DeniedFunc, ErrorFunc, settings]

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
// given; default true. With true, as fiber's logger middleware, Handler
// calls the app's error handler (c.App().ErrorHandler, which writes the
// response), counts the status written, and returns nil, so that fiber
// does not answer the error twice; middleware before Handler no longer
// sees the error. With false the error is returned to fiber as usual and
// the status is the one Status infers, which is right for fiber's
// DefaultErrorHandler but not for a custom one that maps errors to
// statuses of its own.
func WithHandleError(on bool) Option { return func(c *config) { c.Settings.handleError = on } }

// Middleware is fiber middleware deciding with an httplimit.Middleware.
// Make it with New; it is safe for concurrent use.
type Middleware struct {
	mw  *httplimit.Middleware
	cfg config
}

// New returns fiber middleware deciding with mw. A nil mw or Option, or
// an option given nil, is an error wrapping ratewarden.ErrInvalidConfig.
func New(mw *httplimit.Middleware, opts ...Option) (*Middleware, error) {
	c, err := adapterkit.Configure("fiberlimit", mw, config{Denied: Denied, Error: Error, Settings: settings{handleError: true}}, opts)
	if err != nil {
		return nil, err
	}
	return &Middleware{mw: mw, cfg: c}, nil
}

// Handler returns the fiber.Handler: it decides each request as
// httplimit's Handler does, sets the same headers, and calls c.Next for a
// request that may proceed, the denied or error handler otherwise.
//
// Under httplimit.WithCountIf and WithMaxInFlight the request holds its
// reservation and permit while c.Next runs; when it returns they are
// ended with the status the request is answered with (see
// WithHandleError), the reservation kept when the CountFunc counts that
// status and given back otherwise, the permit released. A handler that
// panics ends them with status 0, which counts, and the panic goes on (to
// the recover middleware, say). Checks made by Check beneath the Handler
// are ended the same way, at the same time. The request's view gets a
// context that ends when c.Next returns, so that a permit is extended
// while the handler runs (fiber's own user context never ends).
func (m *Middleware) Handler() fiber.Handler {
	return func(c *fiber.Ctx) error {
		r, err := adaptor.ConvertRequest(c, true)
		if err != nil {
			return m.cfg.Error(c, fmt.Errorf("fiberlimit: request view: %v: %w", err, ratewarden.ErrInvalidKey))
		}
		ctx, cancel := context.WithCancel(c.UserContext())
		defer cancel()
		v := m.mw.Decide(r.WithContext(ctx))
		if ok, err := m.answer(c, v); !ok {
			v.Done(c.Response().StatusCode()) // holds nothing: a no-op, as Done asks
			return err
		}
		return m.next(c, &v)
	}
}

// Settle returns fiber middleware that ends the holds of the checks Check
// of m makes in the handlers after it (under httplimit.WithCountIf and
// WithMaxInFlight), as Handler does, without deciding anything itself:
// for routes limited by Check alone, a login by user name, say.
//
//	app.Post("/login", fl.Settle(), login)
func (m *Middleware) Settle() fiber.Handler {
	return func(c *fiber.Ctx) error { return m.next(c, nil) }
}

// scopeKey is the c.Locals key of the innermost scope: the verdicts
// Check made beneath a Handler or Settle, ended when its c.Next returns.
type scopeKey struct{}

type scope struct{ held []httplimit.Verdict }

// next runs the rest of the chain in a scope of its own, then ends v
// (when not nil) and the scope's verdicts with the final status; 0 when
// the chain panicked. The deferred call does not recover: the panic goes
// on.
func (m *Middleware) next(c *fiber.Ctx, v *httplimit.Verdict) (err error) {
	outer := c.Locals(scopeKey{})
	sc := &scope{}
	c.Locals(scopeKey{}, sc)
	status := 0
	defer func() {
		c.Locals(scopeKey{}, outer) // a later Check belongs to the outer scope, if any
		for _, h := range sc.held {
			h.Done(status)
		}
		if v != nil {
			v.Done(status)
		}
	}()
	err = c.Next()
	switch {
	case err == nil:
		status = c.Response().StatusCode()
	case m.cfg.Settings.handleError:
		// As fiber's logger: the app's error handler answers here, and
		// the error stops, or the router would answer it again.
		if herr := c.App().ErrorHandler(c, err); herr != nil {
			_ = c.SendStatus(fiber.StatusInternalServerError)
		}
		status, err = c.Response().StatusCode(), nil
	default:
		status = Status(err)
	}
	return err
}

// Status is the status fiber's DefaultErrorHandler answers err with: the
// Code of a *fiber.Error (errors.As), else 500.
func Status(err error) int {
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

// Check applies the rule the request matches to key, as
// httplimit.Middleware.Check does, from inside a fiber handler. It
// reports whether the handler should go on; when not, the handler returns
// err (the answer is written, or nobody waits for one).
//
// Under httplimit.WithCountIf and WithMaxInFlight, what a check that
// goes on holds is ended by the innermost Handler or Settle of this
// package that runs the handler, once the chain returns, with its final
// status: put one in front of routes that call Check. Without one the
// check is ended at once with status 0 (fiber's user context never ends,
// unless c.SetUserContext gave one that does, which ends it instead):
// its reservation counts whatever the answer, and its permit caps
// nothing.
func (m *Middleware) Check(c *fiber.Ctx, key string) (ok bool, err error) {
	r, err := adaptor.ConvertRequest(c, true)
	if err != nil {
		return false, m.cfg.Error(c, fmt.Errorf("fiberlimit: request view: %v: %w", err, ratewarden.ErrInvalidKey))
	}
	v := m.mw.DecideKey(r.WithContext(c.UserContext()), key)
	if ok, err = m.answer(c, v); !ok {
		v.Done(c.Response().StatusCode()) // holds nothing
		return false, err
	}
	if sc, _ := c.Locals(scopeKey{}).(*scope); sc != nil {
		sc.held = append(sc.held, v)
		return true, nil
	}
	v.DoneAfter(c.UserContext())
	return true, nil
}

func (m *Middleware) answer(c *fiber.Ctx, v httplimit.Verdict) (bool, error) {
	switch {
	case v.Canceled:
		return false, nil // the client went away: nobody reads an answer
	case v.Err != nil && !v.Proceed:
		return false, m.cfg.Error(c, v.Err)
	}
	var arr [6]httplimit.Field
	for _, f := range v.AppendFields(arr[:0]) {
		c.Set(f.Name, f.Value)
	}
	if v.Proceed {
		return true, nil
	}
	return false, m.cfg.Denied(c, v.Info)
}

// Denied is the default DeniedFunc: httplimit.DeniedProblem by
// c.Status(429).JSON as application/problem+json.
func Denied(c *fiber.Ctx, info httplimit.Info) error {
	return problem(c, httplimit.DeniedProblem(info))
}

// Error is the default ErrorFunc: httplimit.ErrorProblem (400 or 503, a
// fixed detail) by c.Status(...).JSON as application/problem+json.
func Error(c *fiber.Ctx, err error) error {
	return problem(c, httplimit.ErrorProblem(err))
}

func problem(c *fiber.Ctx, p httplimit.Problem) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Status(p.Status).JSON(p, "application/problem+json")
}
