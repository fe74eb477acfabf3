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
// Under httplimit.WithCountIf and WithMaxInFlight a request holds its
// reservation and permit while the rest of the chain runs, and Handler
// ends them with the chain's final status, c.Writer.Status() (0 after a
// panic, which counts): gin.Recovery, if used, goes before Handler. A
// route limited by Check alone (the user name of a login form) puts
// Settle in front, so that its check is settled by the outcome too.
//
// The module is separate from ratewarden's, so that the library's users
// never inherit gin.
package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/httplimit/adapterkit"
)

// A DeniedFunc answers a request over the limit; the rate limit headers
// and Retry-After are set when it is called. It must abort the chain.
type DeniedFunc func(c *gin.Context, info httplimit.Info)

// An ErrorFunc answers a request the middleware could not decide; err is
// as httplimit.ErrorFunc describes it (never send its text). It must
// abort the chain.
type ErrorFunc func(c *gin.Context, err error)

// An Option configures a Middleware.
type Option = adapterkit.Option[*gin.Context, DeniedFunc, ErrorFunc, struct{}]

type config = adapterkit.Config[*gin.Context, DeniedFunc, ErrorFunc, struct{}]

// WithDeniedHandler replaces the answer to a request over the limit;
// default Denied.
func WithDeniedHandler(fn DeniedFunc) Option { return func(c *config) { c.Denied = fn } }

// WithErrorHandler replaces the answer to a request that could not be
// decided; default Error.
func WithErrorHandler(fn ErrorFunc) Option { return func(c *config) { c.Error = fn } }

// Middleware is gin middleware deciding with an httplimit.Middleware.
// Make it with New; it is safe for concurrent use.
type Middleware struct {
	mw  *httplimit.Middleware
	cfg config
}

// New returns gin middleware deciding with mw. A nil mw or Option, or an
// option given nil, is an error wrapping ratewarden.ErrInvalidConfig.
func New(mw *httplimit.Middleware, opts ...Option) (*Middleware, error) {
	c, err := adapterkit.Configure("ginlimit", mw, config{Denied: Denied, Error: Error}, opts)
	if err != nil {
		return nil, err
	}
	return &Middleware{mw: mw, cfg: c}, nil
}

// Handler returns the gin.HandlerFunc: it decides each request as
// httplimit's Handler does, sets the same headers, and calls c.Next for a
// request that may proceed, the denied or error handler otherwise.
//
// Under httplimit.WithCountIf and WithMaxInFlight the request holds its
// reservation and permit while c.Next runs; when it returns they are
// ended with c.Writer.Status(), the status the chain answered with (200
// when it wrote nothing): the reservation is kept when the CountFunc
// counts that status and given back otherwise, the permit released. A
// handler that panics ends them with status 0, which counts, and the
// panic goes on (to gin.Recovery, say). Checks made by Check beneath the
// Handler are ended the same way, at the same time.
func (m *Middleware) Handler() gin.HandlerFunc {
	return func(c *gin.Context) {
		v := m.mw.Decide(request(c))
		if !m.answer(c, v) {
			v.Done(c.Writer.Status()) // holds nothing: a no-op, as Done asks
			return
		}
		next(c, &v)
	}
}

// Settle returns gin middleware that ends the holds of the checks Check
// makes in the handlers after it (under httplimit.WithCountIf and
// WithMaxInFlight), as Handler does, without deciding anything itself:
// for routes limited by Check alone, a login by user name, say.
//
//	router.POST("/login", ginlimit.Settle(), login)
func Settle() gin.HandlerFunc {
	return func(c *gin.Context) { next(c, nil) }
}

// scopeKey is the gin.Context key of the innermost scope: the verdicts
// Check made beneath a Handler or Settle, ended when its c.Next returns.
type scopeKey struct{}

type scope struct{ held []httplimit.Verdict }

// next runs the rest of the chain in a scope of its own, then ends v
// (when not nil) and the scope's verdicts with the final status; 0 when
// the chain panicked. The deferred call does not recover: the panic goes
// on.
func next(c *gin.Context, v *httplimit.Verdict) {
	outer, _ := c.Get(scopeKey{})
	sc := &scope{}
	c.Set(scopeKey{}, sc)
	returned := false
	defer func() {
		status := 0
		if returned {
			status = c.Writer.Status()
		}
		c.Set(scopeKey{}, outer) // a later Check belongs to the outer scope, if any
		for _, h := range sc.held {
			h.Done(status)
		}
		if v != nil {
			v.Done(status)
		}
	}()
	c.Next()
	returned = true
}

// Check applies the rule the request matches to key, as
// httplimit.Middleware.Check does, from inside a gin handler: it reports
// whether the handler should go on; when false the answer is written and
// the chain aborted.
//
// Under httplimit.WithCountIf and WithMaxInFlight, what a check that
// goes on holds is ended by the innermost Handler or Settle of this
// package that runs the handler, once the chain returns, with its final
// status: put one in front of routes that call Check. Without one the
// check is ended when the request's context is done, with status 0: its
// reservation counts whatever the answer, its permit is held until the
// request has been served.
func (m *Middleware) Check(c *gin.Context, key string) bool {
	v := m.mw.DecideKey(request(c), key)
	if !m.answer(c, v) {
		v.Done(c.Writer.Status()) // holds nothing
		return false
	}
	if s, _ := c.Get(scopeKey{}); s != nil {
		if sc, _ := s.(*scope); sc != nil {
			sc.held = append(sc.held, v)
			return true
		}
	}
	v.DoneAfter(c.Request.Context())
	return true
}

func (m *Middleware) answer(c *gin.Context, v httplimit.Verdict) bool {
	switch {
	case v.Canceled:
		c.Abort() // the client went away: nobody reads an answer
		return false
	case v.Err != nil && !v.Proceed:
		m.cfg.Error(c, v.Err)
		return false
	}
	v.SetHeaders(c.Writer.Header())
	if v.Proceed {
		return true
	}
	m.cfg.Denied(c, v.Info)
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
