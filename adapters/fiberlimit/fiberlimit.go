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
// The module is separate from ratewarden's, so that the library's users
// never inherit fiber or fasthttp.
package fiberlimit

import (
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// A DeniedFunc answers a request over the limit; the rate limit headers
// and Retry-After are set when it is called. Its error goes to fiber's
// error handler.
type DeniedFunc func(c *fiber.Ctx, info httplimit.Info) error

// An ErrorFunc answers a request the middleware could not decide; err is
// as httplimit.ErrorFunc describes it (never send its text).
type ErrorFunc func(c *fiber.Ctx, err error) error

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

// Middleware is fiber middleware deciding with an httplimit.Middleware.
// Make it with New; it is safe for concurrent use.
type Middleware struct {
	mw     *httplimit.Middleware
	denied DeniedFunc
	onErr  ErrorFunc
}

// New returns fiber middleware deciding with mw. A nil mw or Option, or
// an option given nil, is an error wrapping ratewarden.ErrInvalidConfig.
func New(mw *httplimit.Middleware, opts ...Option) (*Middleware, error) {
	if mw == nil {
		return nil, fmt.Errorf("fiberlimit: middleware must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	c := config{denied: Denied, onErr: Error}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("fiberlimit: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	switch {
	case c.denied == nil:
		return nil, fmt.Errorf("fiberlimit: WithDeniedHandler: handler must not be nil: %w", ratewarden.ErrInvalidConfig)
	case c.onErr == nil:
		return nil, fmt.Errorf("fiberlimit: WithErrorHandler: handler must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	return &Middleware{mw: mw, denied: c.denied, onErr: c.onErr}, nil
}

// Handler returns the fiber.Handler: it decides each request as
// httplimit's Handler does, sets the same headers, and calls c.Next for a
// request that may proceed, the denied or error handler otherwise.
func (m *Middleware) Handler() fiber.Handler {
	return func(c *fiber.Ctx) error {
		r, err := adaptor.ConvertRequest(c, true)
		if err != nil {
			return m.onErr(c, fmt.Errorf("fiberlimit: request view: %v: %w", err, ratewarden.ErrInvalidKey))
		}
		if ok, err := m.answer(c, m.mw.Decide(r.WithContext(c.UserContext()))); !ok {
			return err
		}
		return c.Next()
	}
}

// Check applies the rule the request matches to key, as
// httplimit.Middleware.Check does, from inside a fiber handler. It
// reports whether the handler should go on; when not, the handler returns
// err (the answer is written, or nobody waits for one).
func (m *Middleware) Check(c *fiber.Ctx, key string) (ok bool, err error) {
	r, err := adaptor.ConvertRequest(c, true)
	if err != nil {
		return false, m.onErr(c, fmt.Errorf("fiberlimit: request view: %v: %w", err, ratewarden.ErrInvalidKey))
	}
	return m.answer(c, m.mw.DecideKey(r.WithContext(c.UserContext()), key))
}

func (m *Middleware) answer(c *fiber.Ctx, v httplimit.Verdict) (bool, error) {
	switch {
	case v.Canceled:
		return false, nil // the client went away: nobody reads an answer
	case v.Err != nil && !v.Proceed:
		return false, m.onErr(c, v.Err)
	}
	var arr [6]httplimit.Field
	for _, f := range v.AppendFields(arr[:0]) {
		c.Set(f.Name, f.Value)
	}
	if v.Proceed {
		return true, nil
	}
	return false, m.denied(c, v.Info)
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
