// Package ginlimit rate limits gin routes with an httplimit.Middleware:
// the same rules, plans, keys, headers and counters as the net/http
// middleware, answered the gin way.
//
//	mw, err := httplimit.New(lim, httplimit.WithLimits(ratewarden.PerMinute(100)))
//	if err != nil {
//		return err
//	}
//	gl, err := ginlimit.New(mw)
//	if err != nil {
//		return err
//	}
//	router.Use(gl.Handler())
//
// Every httplimit option applies (WithKey, WithRule, WithLimitFunc,
// WithShadow, WithFailClosed, ...) except WithDeniedHandler and
// WithErrorHandler, whose place WithDeniedHandler and WithErrorHandler of
// this package take: by default a request over the limit is answered with
// c.AbortWithStatusJSON(429, problem), the RFC 9457 body httplimit writes
// (Content-Type application/problem+json), after the rate limit headers.
// The request httplimit sees carries gin's route as its Pattern
// ("GET /users/:id"), so httplimit.Pattern keys by route.
//
// The module is separate from ratewarden's, so that the library's users
// never inherit gin.
package ginlimit

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// A DeniedFunc answers a request over the limit; the rate limit headers
// and Retry-After are set when it is called. It must abort the chain.
type DeniedFunc func(c *gin.Context, info httplimit.Info)

// An ErrorFunc answers a request the middleware could not decide; err is
// as httplimit.ErrorFunc describes it (never send its text). It must
// abort the chain.
type ErrorFunc func(c *gin.Context, err error)

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

// Middleware is gin middleware deciding with an httplimit.Middleware.
// Make it with New; it is safe for concurrent use.
type Middleware struct {
	mw     *httplimit.Middleware
	denied DeniedFunc
	onErr  ErrorFunc
}

// New returns gin middleware deciding with mw. A nil mw or Option, or an
// option given nil, is an error wrapping ratewarden.ErrInvalidConfig.
func New(mw *httplimit.Middleware, opts ...Option) (*Middleware, error) {
	if mw == nil {
		return nil, fmt.Errorf("ginlimit: middleware must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	c := config{denied: Denied, onErr: Error}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("ginlimit: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	switch {
	case c.denied == nil:
		return nil, fmt.Errorf("ginlimit: WithDeniedHandler: handler must not be nil: %w", ratewarden.ErrInvalidConfig)
	case c.onErr == nil:
		return nil, fmt.Errorf("ginlimit: WithErrorHandler: handler must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	return &Middleware{mw: mw, denied: c.denied, onErr: c.onErr}, nil
}

// Handler returns the gin.HandlerFunc: it decides each request as
// httplimit's Handler does, sets the same headers, and calls c.Next for a
// request that may proceed, the denied or error handler otherwise.
func (m *Middleware) Handler() gin.HandlerFunc {
	return func(c *gin.Context) {
		if m.answer(c, m.mw.Decide(request(c))) {
			c.Next()
		}
	}
}

// Check applies the rule the request matches to key, as
// httplimit.Middleware.Check does, from inside a gin handler: it reports
// whether the handler should go on; when false the answer is written and
// the chain aborted.
func (m *Middleware) Check(c *gin.Context, key string) bool {
	return m.answer(c, m.mw.DecideKey(request(c), key))
}

func (m *Middleware) answer(c *gin.Context, v httplimit.Verdict) bool {
	switch {
	case v.Canceled:
		c.Abort() // the client went away: nobody reads an answer
		return false
	case v.Err != nil && !v.Proceed:
		m.onErr(c, v.Err)
		return false
	}
	v.SetHeaders(c.Writer.Header())
	if v.Proceed {
		return true
	}
	m.denied(c, v.Info)
	return false
}

// request is the request httplimit decides on: gin's, with the matched
// route as its Pattern when it has none.
func request(c *gin.Context) *http.Request {
	r := c.Request
	if r.Pattern == "" && c.FullPath() != "" {
		r = r.WithContext(r.Context())
		r.Pattern = r.Method + " " + c.FullPath()
	}
	return r
}

// Denied is the default DeniedFunc: httplimit.DeniedProblem as an
// application/problem+json body, by c.AbortWithStatusJSON.
func Denied(c *gin.Context, info httplimit.Info) {
	abortProblem(c, httplimit.DeniedProblem(info))
}

// Error is the default ErrorFunc: httplimit.ErrorProblem (400 or 503, a
// fixed detail) by c.AbortWithStatusJSON, with err attached to c.Errors
// for gin's logging middleware.
func Error(c *gin.Context, err error) {
	_ = c.Error(err)
	abortProblem(c, httplimit.ErrorProblem(err))
}

func abortProblem(c *gin.Context, p httplimit.Problem) {
	h := c.Writer.Header()
	h.Set("Content-Type", "application/problem+json") // gin's JSON keeps a Content-Type already set
	h.Set("Cache-Control", "no-store")
	c.AbortWithStatusJSON(p.Status, p)
}
