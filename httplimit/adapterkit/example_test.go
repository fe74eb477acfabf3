package adapterkit_test

import (
	"errors"
	"fmt"
	"log"
	"net/http"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/httplimit/adapterkit"
	"github.com/ratewarden/ratewarden/memstore"
)

// Context is the request context of a made-up framework, fw, whose
// handlers return an error for the framework to answer.
type Context struct {
	W http.ResponseWriter
	R *http.Request
}

// DeniedFunc answers a request over the limit.
type DeniedFunc func(c *Context, info httplimit.Info) error

// ErrorFunc answers a request that could not be decided.
type ErrorFunc func(c *Context, err error) error

// fwSettings are the adapter's own settings, beside the handlers.
type fwSettings struct{ headers bool }

type fwConfig = adapterkit.Config[*Context, DeniedFunc, ErrorFunc, fwSettings]

// Option configures a Middleware.
type Option = adapterkit.Option[*Context, DeniedFunc, ErrorFunc, fwSettings]

// WithDeniedHandler replaces the answer to a request over the limit.
func WithDeniedHandler(fn DeniedFunc) Option { return func(c *fwConfig) { c.Denied = fn } }

// WithErrorHandler replaces the answer to a request that could not be
// decided.
func WithErrorHandler(fn ErrorFunc) Option { return func(c *fwConfig) { c.Error = fn } }

// WithHeaders turns the rate limit headers on or off; default on.
func WithHeaders(on bool) Option { return func(c *fwConfig) { c.Settings.headers = on } }

// Middleware is the adapter: fw middleware deciding with mw.
type Middleware struct {
	mw  *httplimit.Middleware
	cfg fwConfig
}

// New is the adapter's constructor: its defaults, then opts, validated.
func New(mw *httplimit.Middleware, opts ...Option) (*Middleware, error) {
	defaults := fwConfig{Denied: Denied, Error: Error, Settings: fwSettings{headers: true}}
	c, err := adapterkit.Configure("fwlimit", mw, defaults, opts)
	if err != nil {
		return nil, err
	}
	return &Middleware{mw: mw, cfg: c}, nil
}

// Denied is the default DeniedFunc: httplimit's problem, written.
func Denied(c *Context, info httplimit.Info) error {
	httplimit.WriteProblem(c.W, httplimit.DeniedProblem(info))
	return nil
}

// Error is the default ErrorFunc: httplimit's 400 or 503 problem.
func Error(c *Context, err error) error {
	httplimit.WriteProblem(c.W, httplimit.ErrorProblem(err))
	return nil
}

func Example() {
	st, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New(lim, httplimit.WithLimits(ratewarden.PerMinute(100)))
	if err != nil {
		log.Fatal(err)
	}

	m, err := New(mw, WithHeaders(false))
	fmt.Println(err, m.cfg.Settings.headers)
	for _, opts := range [][]Option{{WithDeniedHandler(nil)}, {WithHeaders(true), nil}} {
		_, err := New(mw, opts...)
		fmt.Println(err, errors.Is(err, ratewarden.ErrInvalidConfig))
	}
	_, err = New(nil)
	fmt.Println(err)
	// Output:
	// <nil> false
	// fwlimit: WithDeniedHandler: handler must not be nil: invalid config true
	// fwlimit: option 1 is nil: invalid config true
	// fwlimit: middleware must not be nil: invalid config
}
