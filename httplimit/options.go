package httplimit

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/ratewarden/ratewarden"
)

// An Option configures a Middleware; pass options to New, which
// validates what they collected.
type Option func(*config)

// config is what the options collect, on top of the defaults New starts
// from; New validates it. A function option given nil is kept as nil, so
// that New can name it.
type config struct {
	rules        []Rule
	defaultRules []Rule // WithLimits and WithPolicies: at most one
	key          KeyFunc
	cost         CostFunc
	skip         func(*http.Request) bool
	shadow       bool
	headers      HeaderSet
	denied       DeniedFunc
	onErr        ErrorFunc
	onLimit      func(*http.Request, Info)
	failClosed   bool
	log          *slog.Logger
}

// defaults is the config before any option: see New.
func defaults() config {
	key, _ := ClientIP(IPConfig{}) // the zero IPConfig is valid
	return config{
		key:     key,
		cost:    unitCost,
		skip:    noSkip,
		headers: DraftHeaders | XRateLimitHeaders,
		denied:  ProblemDenied,
		onErr:   ProblemError,
		log:     slog.Default(),
	}
}

func unitCost(*http.Request) (int64, error) { return 1, nil }

func noSkip(*http.Request) bool { return false }

// validate names the first option given a value it cannot use.
func (c *config) validate() error {
	var msg string
	switch {
	case len(c.defaultRules) > 1:
		msg = "WithLimits/WithPolicies given twice"
	case c.key == nil:
		msg = "WithKey: key function must not be nil"
	case c.cost == nil:
		msg = "WithCost: cost function must not be nil"
	case c.skip == nil:
		msg = "WithSkip: skip function must not be nil"
	case c.headers >= XRateLimitResetUnix<<1:
		msg = fmt.Sprintf("WithHeaders: unknown header bits %#x", uint8(c.headers))
	case c.denied == nil:
		msg = "WithDeniedHandler: handler must not be nil"
	case c.onErr == nil:
		msg = "WithErrorHandler: handler must not be nil"
	case c.log == nil:
		msg = "WithLogger: logger must not be nil"
	default:
		return nil
	}
	return fmt.Errorf("httplimit: %s: %w", msg, ratewarden.ErrInvalidConfig)
}

// A CostFunc returns how many units a request consumes (its weight), for
// example 10 for a bulk endpoint. It must return 0 to every limit's
// Capacity; other values, and its errors, go to the error handler (400 by
// default). An error should wrap ratewarden.ErrInvalidCost.
type CostFunc func(r *http.Request) (int64, error)

// A DeniedFunc writes the response to a request over the limit. The rate
// limit headers and Retry-After are already set when it is called.
type DeniedFunc func(w http.ResponseWriter, r *http.Request, info Info)

// An ErrorFunc writes the response to a request the middleware could not
// decide: err wraps ratewarden.ErrInvalidKey (no key), ErrInvalidCost (bad
// cost) or, under WithFailClosed, ErrStoreUnavailable. It must not send
// err's text to the client.
type ErrorFunc func(w http.ResponseWriter, r *http.Request, err error)

// WithLimits sets the limits of the default rule, which applies to every
// request no WithRule rule matches: all of them are checked together, in
// one atomic step, e.g. WithLimits(ratewarden.PerSecond(10),
// ratewarden.PerDay(10000)). Each is advertised under its String form as
// policy name.
func WithLimits(limits ...ratewarden.Limit) Option {
	ps := make([]Policy, len(limits))
	for i, l := range limits {
		ps[i] = Policy{Limit: l}
	}
	return WithPolicies(ps...)
}

// WithPolicies is WithLimits with policy names of your choice.
func WithPolicies(policies ...Policy) Option {
	ps := append([]Policy(nil), policies...)
	return func(c *config) {
		c.defaultRules = append(c.defaultRules, Rule{Name: DefaultRuleName, Policies: ps})
	}
}

// WithRule adds a rule: per-route limits. Rules are tried in the order
// they were added and the first whose Match reports true applies; the
// default rule (WithLimits) comes last. A request no rule matches is not
// limited.
func WithRule(r Rule) Option {
	return func(c *config) { c.rules = append(c.rules, r) }
}

// WithKey sets how requests are keyed; default: ClientIP with no trusted
// proxies (the TCP peer's address).
func WithKey(fn KeyFunc) Option {
	return func(c *config) { c.key = fn }
}

// WithCost sets the weight of each request; default 1.
func WithCost(fn CostFunc) Option {
	return func(c *config) { c.cost = fn }
}

// WithSkip exempts the requests for which fn reports true (health checks,
// an allowlist of partners): they pass without being counted and get no
// rate limit headers.
func WithSkip(fn func(*http.Request) bool) Option {
	return func(c *config) { c.skip = fn }
}

// WithShadow turns shadow (dry-run) mode on or off. In shadow mode every
// request is decided, counted and given its rate limit headers as usual,
// and requests over the limit are reported (WithOnLimit for each, and an
// Info line in the log at most once a second with the count since the last
// line) but passed to the next handler: a way to try a limit on
// production traffic before enforcing it. Retry-After is not sent.
func WithShadow(on bool) Option {
	return func(c *config) { c.shadow = on }
}

// HeaderSet selects the rate limit response headers. Retry-After is always
// sent with a rejection, whatever the set.
type HeaderSet uint8

const (
	// DraftHeaders sends the RateLimit-Policy and RateLimit fields of the
	// IETF draft "RateLimit header fields for HTTP"
	// (draft-ietf-httpapi-ratelimit-headers), one item per policy:
	//
	//	RateLimit-Policy: "100/1m";q=100;w=60, "10000/1d";q=10000;w=86400
	//	RateLimit: "100/1m";r=99;t=60, "10000/1d";r=9999;t=86400
	//
	// q is the limit's capacity, w its period in seconds, r the remaining
	// units and t the seconds until the policy is back to full allowance
	// (both rounded up).
	DraftHeaders HeaderSet = 1 << iota
	// XRateLimitHeaders sends the widespread X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset for the binding policy
	// (ratewarden.Decision.Binding). Reset is in seconds from now.
	XRateLimitHeaders
	// XRateLimitResetUnix, with XRateLimitHeaders, sends X-RateLimit-Reset
	// as a Unix time in seconds instead (as GitHub does). That value comes
	// from this server's clock.
	XRateLimitResetUnix
)

// WithHeaders selects the rate limit headers; default DraftHeaders |
// XRateLimitHeaders. WithHeaders(0) sends none but Retry-After.
func WithHeaders(h HeaderSet) Option {
	return func(c *config) { c.headers = h }
}

// WithDeniedHandler replaces the response to a request over the limit;
// default ProblemDenied.
func WithDeniedHandler(fn DeniedFunc) Option {
	return func(c *config) { c.denied = fn }
}

// WithErrorHandler replaces the response to a request the middleware
// could not decide; default ProblemError.
func WithErrorHandler(fn ErrorFunc) Option {
	return func(c *config) { c.onErr = fn }
}

// WithOnLimit registers fn to be told of every request over the limit,
// including those shadow mode lets pass (for metrics or audit logs). It
// runs on the request's goroutine before the response is written.
func WithOnLimit(fn func(r *http.Request, info Info)) Option {
	return func(c *config) { c.onLimit = fn }
}

// WithFailClosed decides what happens when the Limiter returns a store
// error, that is, when its store is not wrapped by a failure policy (see
// package fallback, whose degraded Results are honoured like any other).
// By default (false) the request passes and the error is logged: an
// outage of the limiter should not become an outage of the API. With true
// the request gets the error handler's response (503 Service Unavailable
// by default). Either way the error's text never reaches the client.
func WithFailClosed(on bool) Option {
	return func(c *config) { c.failClosed = on }
}

// WithLogger sets the logger for store errors and shadow-mode denials;
// default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.log = l }
}
