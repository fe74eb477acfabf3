package httplimit

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
)

// An Option configures a Middleware; pass options to New. Options only
// record their value; New validates what they collected and fails with
// an error that names the option or field at fault. When an option is
// given twice, the last one counts (WithRule adds a rule each time).
type Option func(*config)

// config is what the options collect, on top of the defaults New starts
// from; validate checks it. A function option given nil is kept as nil,
// so that validate can name it.
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
	pkSecret     []byte    // WithPartitionKey; nil: no pk
	ip           *IPConfig // WithClientIP's, as given: keys by ClientIP(*ip), with the proxy checks; nil: by key
	countIf      CountFunc // WithCountIf; nil: every request counts
	countIfSet   bool      // WithCountIf was given (possibly nil)
	maxInFlight  int64     // WithMaxInFlight; 0: no cap
	inFlightTTL  time.Duration
	inFlightSet  bool // WithMaxInFlight was given
}

// defaults is the config before any option: see New.
func defaults() config {
	return config{
		ip:      &IPConfig{},
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

// newConfig applies opts to the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	c := defaults()
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("httplimit: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	if err := c.validate(); err != nil {
		return config{}, err
	}
	return c, nil
}

// validate names the first option given a value it cannot use, and then
// the first fault of the rules, in the order New tries them.
func (c *config) validate() error {
	if err := c.validateOptions(); err != nil {
		return err
	}
	return c.validateRules()
}

func (c *config) validateOptions() error {
	if c.ip != nil {
		if _, err := c.ip.validate(); err != nil {
			return err // WithClientIP: the error names the IPConfig field
		}
	}
	var msg string
	switch {
	case len(c.defaultRules) > 1:
		msg = "WithLimits/WithPolicies/WithLimitFunc given twice"
	case c.ip == nil && c.key == nil:
		msg = "WithKey: key function must not be nil"
	case c.cost == nil:
		msg = "WithCost: cost function must not be nil"
	case c.skip == nil:
		msg = "WithSkip: skip function must not be nil"
	case c.headers&^allHeaders != 0:
		msg = fmt.Sprintf("WithHeaders: unknown header bits %#x", uint8(c.headers&^allHeaders))
	case c.headers&XRateLimitResetUnix != 0 && c.headers&XRateLimitResetDelta != 0:
		msg = "WithHeaders: XRateLimitResetUnix and XRateLimitResetDelta exclude each other"
	case c.pkSecret != nil && len(c.pkSecret) < MinPartitionSecret:
		msg = fmt.Sprintf("WithPartitionKey: secret must be at least %d bytes, got %d", MinPartitionSecret, len(c.pkSecret))
	case c.denied == nil:
		msg = "WithDeniedHandler: handler must not be nil"
	case c.onErr == nil:
		msg = "WithErrorHandler: handler must not be nil"
	case c.log == nil:
		msg = "WithLogger: logger must not be nil"
	case c.countIfSet && c.countIf == nil:
		msg = "WithCountIf: count function must not be nil"
	case c.inFlightSet:
		// What Limiter.Acquire takes, checked here so that a bad cap fails
		// New rather than every request.
		if err := ratewarden.ValidatePermit(c.maxInFlight, c.inFlightTTL); err != nil {
			return fmt.Errorf("httplimit: WithMaxInFlight: %w", err)
		}
		return nil
	default:
		return nil
	}
	return fmt.Errorf("httplimit: %s: %w", msg, ratewarden.ErrInvalidConfig)
}

// allRules is the rules New serves, in the order it tries them: those of
// WithRule, then the default rule.
func (c *config) allRules() []Rule {
	return append(c.rules[:len(c.rules):len(c.rules)], c.defaultRules...)
}

func (c *config) validateRules() error {
	rules := c.allRules()
	if len(rules) == 0 {
		return fmt.Errorf("httplimit: no limits configured (use WithLimits, WithPolicies or WithRule): %w", ratewarden.ErrInvalidConfig)
	}
	seen := make(map[string]bool, len(rules))
	for _, r := range rules {
		if seen[r.Name] {
			return fmt.Errorf("httplimit: rule %q given twice: %w", r.Name, ratewarden.ErrInvalidConfig)
		}
		seen[r.Name] = true
		if err := validateRule(r); err != nil {
			return err
		}
	}
	return nil
}

// validateRule names the first fault of r: of the rule, of its plans, or
// of their policies.
func validateRule(r Rule) error {
	switch {
	case r.Name == "":
		return fmt.Errorf("httplimit: Rule.Name must not be empty: %w", ratewarden.ErrInvalidConfig)
	case strings.ContainsRune(r.Name, '|'):
		return fmt.Errorf("httplimit: rule %q: Rule.Name must not contain '|' (it separates the rule from the client key): %w", r.Name, ratewarden.ErrInvalidConfig)
	case (len(r.Plans) == 0) != (r.PlanFunc == nil):
		return fmt.Errorf("httplimit: rule %q: Rule.Plans and Rule.PlanFunc go together: set both or neither: %w", r.Name, ratewarden.ErrInvalidConfig)
	case len(r.Plans) > 0 && len(r.Policies) > 0:
		return fmt.Errorf("httplimit: rule %q: a rule with Plans takes its policies from them: leave Rule.Policies empty: %w", r.Name, ratewarden.ErrInvalidConfig)
	case len(r.Plans) == 0 && len(r.Policies) == 0:
		return fmt.Errorf("httplimit: rule %q: Rule.Policies must not be empty: %w", r.Name, ratewarden.ErrInvalidConfig)
	case len(r.Plans) == 0:
		return validatePolicies(fmt.Sprintf("rule %q", r.Name), r.Policies)
	}
	plans := make(map[string]bool, len(r.Plans))
	for i, pl := range r.Plans {
		switch {
		case pl.Name == "":
			return fmt.Errorf("httplimit: rule %q: Plans[%d].Name must not be empty: %w", r.Name, i, ratewarden.ErrInvalidConfig)
		case strings.ContainsRune(pl.Name, '|'):
			return fmt.Errorf("httplimit: rule %q: plan %q: Plan.Name must not contain '|': %w", r.Name, pl.Name, ratewarden.ErrInvalidConfig)
		case plans[pl.Name]:
			return fmt.Errorf("httplimit: rule %q: plan %q given twice: %w", r.Name, pl.Name, ratewarden.ErrInvalidConfig)
		case len(pl.Policies) == 0:
			return fmt.Errorf("httplimit: rule %q: plan %q: Plan.Policies must not be empty: %w", r.Name, pl.Name, ratewarden.ErrInvalidConfig)
		}
		plans[pl.Name] = true
		if err := validatePolicies(fmt.Sprintf("rule %q: plan %q", r.Name, pl.Name), pl.Policies); err != nil {
			return err
		}
	}
	return nil
}

// validatePolicies names the first fault of one list of policies; where
// names the list.
func validatePolicies(where string, policies []Policy) error {
	names := make(map[string]bool, len(policies))
	for i, pol := range policies {
		if err := pol.Limit.Validate(); err != nil {
			return fmt.Errorf("httplimit: %s: policy %d: %w", where, i, err)
		}
		name := pol.name()
		if err := validPolicyName(name); err != nil {
			return fmt.Errorf("httplimit: %s: policy %d: Policy.Name %w", where, i, err)
		}
		if names[name] {
			return fmt.Errorf("httplimit: %s: policy name %q given twice: %w", where, name, ratewarden.ErrInvalidConfig)
		}
		names[name] = true
		for j := range i {
			if policies[j].Limit.Scope() == pol.Limit.Scope() {
				return fmt.Errorf("httplimit: %s: policies %d and %d share the scope %s (algorithm and period); give each a different one: %w", where, j, i, pol.Limit.Scope(), ratewarden.ErrInvalidLimit)
			}
		}
	}
	return nil
}

func validPolicyName(s string) error {
	if len(s) > 64 {
		return fmt.Errorf("must be at most 64 bytes, got %d: %w", len(s), ratewarden.ErrInvalidConfig)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("%q must be printable ASCII: %w", s, ratewarden.ErrInvalidConfig)
		}
	}
	return nil
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

// WithLimitFunc makes the default rule's limits depend on the request: fn
// names the plan of each request (the authenticated user's tier, say) and
// that plan's policies are checked, e.g.
//
//	httplimit.WithLimitFunc(planOfUser,
//		httplimit.Plan{Name: "free", Policies: []httplimit.Policy{{Limit: ratewarden.PerMinute(10)}}},
//		httplimit.Plan{Name: "pro", Policies: []httplimit.Policy{{Limit: ratewarden.PerMinute(1000)}}})
//
// Each plan counts on keys of its own ("default|<plan>|<client key>"), so
// plans never share counters, even with policies of the same scope. The
// plans are fixed here: a client has at most one set of counters per plan,
// each expiring like any other, however many requests or users there are.
// It takes the place of WithLimits (give one or the other); for per-route
// plans set Rule.Plans and Rule.PlanFunc.
func WithLimitFunc(fn LimitFunc, plans ...Plan) Option {
	ps := append([]Plan(nil), plans...)
	return func(c *config) {
		c.defaultRules = append(c.defaultRules, Rule{Name: DefaultRuleName, Plans: ps, PlanFunc: fn})
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
// proxies (the TCP peer's address). It turns off the forwarding checks of
// WithClientIP; to key by address with them, use WithClientIP instead of
// WithKey(ClientIP(cfg)).
func WithKey(fn KeyFunc) Option {
	return func(c *config) { c.key, c.ip = fn, nil }
}

// WithClientIP keys requests by ClientIP(cfg) and checks every request for
// the two misconfigurations that make address keys wrong, logging a
// warning the first time each is seen and counting every occurrence (see
// Middleware.ProxyWarnings):
//
//   - a peer in cfg.TrustedProxies sent no cfg.Header: either the proxy does
//     not write that header (then every client behind it shares the
//     proxy's budget; configure the proxy, or pick the header it writes in
//     IPConfig.Header) or a host inside the trusted networks called
//     directly (a health check, which is harmless);
//   - cfg trusts no proxy but a request carries X-Forwarded-For, Forwarded
//     or X-Real-IP: when this server is behind a proxy, every client shares
//     its budget; list the proxy in IPConfig.TrustedProxies. (When it is not,
//     a client sent the header and it was rightly ignored.)
//
// The default key function is WithClientIP(IPConfig{}) with its checks.
func WithClientIP(cfg IPConfig) Option {
	cfg.TrustedProxies = slices.Clone(cfg.TrustedProxies) // the caller's may change
	return func(c *config) { c.key, c.ip = nil, &cfg }
}

// WithPartitionKey adds the draft's partition key (pk) to every RateLimit
// item: a hash of the request's key under secret (at least
// MinPartitionSecret bytes), never the key itself; see
// Renderer.WithPartitionKey. Off by default.
func WithPartitionKey(secret []byte) Option {
	s := append([]byte{}, secret...)
	return func(c *config) { c.pkSecret = s }
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
	// (draft-ietf-httpapi-ratelimit-headers, sections 3 and 4), one item
	// per policy:
	//
	//	RateLimit-Policy: "100/1m";q=100;w=60, "10000/1d";q=10000;w=86400
	//	RateLimit: "100/1m";r=99;t=60, "10000/1d";r=9999;t=86400
	//
	// q is the limit's capacity, w its period in seconds, r the remaining
	// units and t the effective window in seconds (see Renderer: on a
	// rejection it never exceeds Retry-After, and the binding policy's t
	// equals it). With WithPartitionKey each RateLimit item also carries pk.
	DraftHeaders HeaderSet = 1 << iota
	// XRateLimitHeaders sends the widespread X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset for the binding policy
	// (ratewarden.Decision.Binding). Reset is a Unix time in seconds, from
	// this server's clock, as GitHub, go-chi/httprate and
	// express-rate-limit's legacy headers send it.
	XRateLimitHeaders
	// XRateLimitResetUnix is the default form of X-RateLimit-Reset, a Unix
	// time; the bit changes nothing.
	//
	// Deprecated: X-RateLimit-Reset is a Unix time unless
	// XRateLimitResetDelta is set.
	XRateLimitResetUnix
	// XRateLimitResetDelta, with XRateLimitHeaders, sends X-RateLimit-Reset
	// as seconds from now (rounded up) instead of a Unix time, for clients
	// that expect that form (as Twitter's v1 and some gateways did).
	XRateLimitResetDelta

	allHeaders = DraftHeaders | XRateLimitHeaders | XRateLimitResetUnix | XRateLimitResetDelta
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

// A CountFunc reports whether a request whose handler answered with
// status counts against the limits (WithCountIf). r is the request the
// decision was made on: the one Handler received, or the one given to
// Decide or DecideKey (adapters carry their framework's details in its
// context). It must be safe for concurrent use.
type CountFunc func(r *http.Request, status int) bool

// Failed is a CountFunc that counts the responses with a status of 400
// or more: with WithCountIf(Failed) only failed requests consume the
// limits, as express-rate-limit's skipSuccessfulRequests does. Limiting
// a login form by user to "5 failures per 15 minutes" counts the 401s
// and gives back what the successful logins reserved.
func Failed(_ *http.Request, status int) bool { return status >= 400 }

// WithCountIf makes a request count against the limits only when fn
// reports true for the status its handler answered with.
//
// The decision stays one atomic step on the shared store: before the
// handler runs, the request's cost is reserved on every limit of its
// rule (Limiter.Reserve), and a request the reservation does not fit is
// denied then, with the usual 429, without running the handler. After
// the handler returns, the reservation is settled: kept when fn reports
// true, given back (Reservation.Cancel) when it reports false. So
// requests in flight count until they end: with a limit of 5, ten
// concurrent logins deny the sixth, even if every one of them succeeds
// and gives its unit back afterwards.
//
// The status fn sees is the first final status the handler wrote; 200
// when it wrote only a body, or nothing; 101 when it hijacked the
// connection without writing one. A handler that panics counts whatever
// fn says, and the panic goes on. The rate limit headers describe the
// reservation's decision: a unit given back after the response was
// written is not reflected in them (the next response shows it).
// Settling happens before Handler returns, so an unflushed response
// reaches the client after its units are given back.
//
// Decide and DecideKey hold the reservation in the Verdict until
// Verdict.Done; Check cannot, and answers with an error under
// WithCountIf.
func WithCountIf(fn CountFunc) Option {
	return func(c *config) { c.countIf, c.countIfSet = fn, true }
}

// WithMaxInFlight caps the requests of one key (the rule's key for the
// client, as Info.Key shows it) in flight at once, on every replica
// together: before the rate limits are checked the request takes one of
// max permits of its key (Limiter.Acquire) and it gives the permit back
// when its handler returns, or panics. A request that finds max permits
// held is denied with 429 Too Many Requests and Retry-After (see
// InFlight.RetryAfter), through the denied handler with Info.InFlight
// saying why; it consumes nothing from the rate limits. A request the
// rate limits deny gives its permit back at once.
//
// ttl bounds how long a permit outlives a replica that crashed holding
// it: the store drops a permit ttl after it was taken or last extended.
// While the handler runs, the middleware extends its permit every ttl/2
// (a timer, stopped when the handler returns), so ttl need not exceed
// the longest request: choose it as the time a dead replica's requests
// may keep counting, well above a store call's worst latency (10 to 60
// seconds suits most services).
//
// 429 rather than 503: the cap is per client, which sent too many
// requests at once, and proxies and clients retry a 503 at once,
// adding load where the cap sheds it.
//
// A store error follows WithFailClosed: by default the request goes on
// without a permit (not counted in flight) and the error is logged. A
// failure policy's permit (package fallback) is honoured like a degraded
// Result; its Source is in Info.InFlight. Decide and DecideKey hold the
// permit in the Verdict until Verdict.Done; Check cannot, and answers
// with an error under WithMaxInFlight. max must be 1 to
// ratewarden.MaxPermits and ttl ratewarden.MinPeriod to MaxPeriod.
func WithMaxInFlight(max int64, ttl time.Duration) Option {
	return func(c *config) { c.maxInFlight, c.inFlightTTL, c.inFlightSet = max, ttl, true }
}
