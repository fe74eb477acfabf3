// Package adapterkit is the option set that httplimit's framework
// adapters (ginlimit, echolimit, fiberlimit, grpclimit) share, for them
// and for anyone writing one more: the Option type an adapter's options
// are, parameterised on the framework's context and the adapter's two
// handler types, and Configure, which an adapter's New calls to apply
// the options over its defaults and validate the result.
//
// An adapter names its handler types and its own settings once, and
// writes each option as one assignment:
//
//	type DeniedFunc func(c *fw.Context, info httplimit.Info) error
//	type ErrorFunc func(c *fw.Context, err error) error
//
//	type settings struct{ handleError bool }
//
//	type config = adapterkit.Config[*fw.Context, DeniedFunc, ErrorFunc, settings]
//
//	// An Option configures a Middleware.
//	type Option = adapterkit.Option[*fw.Context, DeniedFunc, ErrorFunc, settings]
//
//	func WithDeniedHandler(fn DeniedFunc) Option { return func(c *config) { c.Denied = fn } }
//
//	func New(mw *httplimit.Middleware, opts ...Option) (*Middleware, error) {
//		c, err := adapterkit.Configure("fwlimit", mw, config{Denied: Denied, Error: Error}, opts)
//		if err != nil {
//			return nil, err
//		}
//		return &Middleware{mw: mw, cfg: c}, nil
//	}
//
// The package depends on no framework: it is part of ratewarden's module,
// so the adapters' modules (and a user's) can build on it without the
// library's users inheriting anything.
package adapterkit

import (
	"fmt"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// Handler is the shape of an adapter's denied handler (A is
// httplimit.Info) or error handler (A is error) on the framework's
// context C: it returns the error the framework answers with (echo,
// fiber, gRPC), or nothing when it answers in place (gin). Any function
// type of either shape will do, so an adapter keeps handler types of its
// own, with docs of its own.
type Handler[C, A any] interface {
	~func(C, A) error | ~func(C, A)
}

// Config is what an adapter's options set: the answer to a request over
// the limit, the answer to one that could not be decided, and the
// adapter's own settings S (struct{} when it has none).
type Config[C any, D Handler[C, httplimit.Info], E Handler[C, error], S any] struct {
	Denied   D // set by the adapter's WithDeniedHandler; never nil after Configure
	Error    E // set by the adapter's WithErrorHandler; never nil after Configure
	Settings S
}

// An Option sets a field of a Config. Options only record values:
// Configure validates the Config once all are applied, so the last
// option to set a field wins.
type Option[C any, D Handler[C, httplimit.Info], E Handler[C, error], S any] func(*Config[C, D, E, S])

// Configure returns defaults with opts applied in order, for the New of
// the adapter named pkg that decides with mw. It fails, with an error
// "pkg: detail: ..." wrapping ratewarden.ErrInvalidConfig, when mw is nil,
// when an option is nil (naming its index), or when Denied or Error is
// nil once the options are applied (naming the option that sets it,
// WithDeniedHandler or WithErrorHandler, as every adapter calls them).
// Settings are the adapter's to check.
func Configure[C any, D Handler[C, httplimit.Info], E Handler[C, error], S any](pkg string, mw *httplimit.Middleware, defaults Config[C, D, E, S], opts []Option[C, D, E, S]) (Config[C, D, E, S], error) {
	var zero Config[C, D, E, S]
	if mw == nil {
		return zero, fmt.Errorf("%s: middleware must not be nil: %w", pkg, ratewarden.ErrInvalidConfig)
	}
	c := defaults
	for i, o := range opts {
		if o == nil {
			return zero, fmt.Errorf("%s: option %d is nil: %w", pkg, i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	switch {
	case c.Denied == nil:
		return zero, fmt.Errorf("%s: WithDeniedHandler: handler must not be nil: %w", pkg, ratewarden.ErrInvalidConfig)
	case c.Error == nil:
		return zero, fmt.Errorf("%s: WithErrorHandler: handler must not be nil: %w", pkg, ratewarden.ErrInvalidConfig)
	}
	return c, nil
}
