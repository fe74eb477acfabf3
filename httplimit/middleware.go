package httplimit

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit/internal/clientip"
)

// A Policy is one limit as it is advertised to clients: the RateLimit and
// RateLimit-Policy headers list each policy under its Name.
type Policy struct {
	// Name identifies the policy in the headers: printable ASCII, at most
	// 64 bytes. Empty means the limit's String form, e.g. "100/1m".
	Name  string
	Limit ratewarden.Limit
}

// name is the policy's name in the headers.
func (p Policy) name() string {
	if p.Name == "" {
		return p.Limit.String()
	}
	return p.Name
}

// A Rule applies a set of policies to the requests it matches: per route
// limits. All policies of a rule are checked for a request in one atomic
// Limiter.AllowAll call, so a request denied by one (say, 1000 per day)
// consumes nothing from another (10 per second).
type Rule struct {
	// Name identifies the rule; it prefixes every key ("<name>|<key>"), so
	// rules never share counters. Required, unique, without '|'.
	Name string
	// Match selects the requests the rule applies to; nil matches all.
	Match func(*http.Request) bool
	// Policies are checked together; at least one, with distinct scopes
	// (algorithm and period). Empty when the rule has Plans.
	Policies []Policy
	// Plans and PlanFunc make the limits depend on the request (a pricing
	// tier, say): PlanFunc names the plan of each request, and the plan's
	// policies are checked instead of Policies. Each plan counts on keys
	// of its own ("<rule>|<plan>|<client key>"), so a client moved to
	// another plan starts afresh there. The plans are fixed here, so a
	// client has at most len(Plans) sets of counters, each expiring like
	// any other. Set both or neither.
	Plans    []Plan
	PlanFunc LimitFunc
}

// A Plan is a named set of policies, one of those a rule chooses from per
// request (see Rule.Plans and WithLimitFunc).
type Plan struct {
	// Name identifies the plan in keys and in Info.Plan: required, unique
	// within the rule, without '|'.
	Name string
	// Policies are checked together, as Rule.Policies are.
	Policies []Policy
}

// A LimitFunc returns the name of the plan that limits r, for example the
// tier of the authenticated user. An error wrapping
// ratewarden.ErrInvalidKey (the request identifies no user) goes to the
// error handler as a 400; a name that is none of the rule's plans, or any
// other error, as a 503 (wrapping ratewarden.ErrInvalidConfig). It must be
// safe for concurrent use.
type LimitFunc func(r *http.Request) (string, error)

// DefaultRuleName is the name of the rule WithLimits and WithPolicies
// configure.
const DefaultRuleName = "default"

// Info describes one decision the middleware made. Handlers and callbacks
// must not modify it (Policies is shared by all requests of the rule) nor
// retain it after they return.
type Info struct {
	// Rule is the name of the rule that matched.
	Rule string
	// Plan is the name of the plan the rule's PlanFunc chose; empty for a
	// rule without plans.
	Plan string
	// Key is the key checked: "<rule>|<client key>", or
	// "<rule>|<plan>|<client key>" for a rule with plans.
	Key string
	// Cost is the number of units the request asked for.
	Cost int64
	// Policies are the rule's policies, in the order of Decision.Results.
	Policies []Policy
	// Decision is the Limiter's verdict. Decision.Binding() is the result
	// the X-RateLimit headers and Retry-After describe.
	Decision ratewarden.Decision
	// Shadow is set when the request was over the limit but passed because
	// the middleware is in shadow mode.
	Shadow bool
	// InFlight is the request's permit under WithMaxInFlight. When
	// InFlight.Denied() the request was over that cap: outside shadow mode
	// the rate limits were not checked then, and Decision has no Results.
	InFlight InFlight
}

// Middleware limits the requests to the handlers it wraps. Make one with
// New; it is safe for concurrent use. Use Handler as the standard
// func(http.Handler) http.Handler middleware (chi: r.Use(m.Handler)).
type Middleware struct {
	lim        *ratewarden.Limiter
	rules      []rule
	key        KeyFunc
	cost       CostFunc
	skip       func(*http.Request) bool
	shadow     bool
	headers    HeaderSet
	denied     DeniedFunc
	onErr      ErrorFunc
	onLimit    func(*http.Request, Info)
	failClosed bool
	log        *slog.Logger

	countIf     CountFunc // WithCountIf; nil: check outright
	maxInFlight int64     // WithMaxInFlight; 0: no cap
	inFlightTTL time.Duration

	storeLog  logThrottle // store errors
	shadowLog logThrottle // over-limit requests passed in shadow mode
	afterLog  logThrottle // failed settlements, releases and extensions
	checkLog  atomic.Bool // Check under WithCountIf or WithMaxInFlight was logged

	ip         *IPConfig    // WithClientIP (or the default key): checked per request; nil: no checks
	noForward  atomic.Int64 // trusted peer without the forwarding header
	untrustFwd atomic.Int64 // forwarding header while no proxy is trusted
}

// rule is a validated Rule: its plans, or the one plan of its Policies.
type rule struct {
	Rule
	plans  []*plan
	byName map[string]*plan // rules with a PlanFunc
}

// plan is one validated set of policies of a rule, with its renderer and
// the prefix of its keys.
type plan struct {
	name     string // "" for a rule without plans
	prefix   string // "<rule>|" or "<rule>|<plan>|"
	policies []Policy
	limits   []ratewarden.Limit
	render   *Renderer
}

// New returns a Middleware deciding on l. With no options other than
// limits it keys requests by the TCP peer's address (ClientIP with no
// trusted proxies), sends the draft RateLimit headers and the X-RateLimit
// headers, rejects with 429 and an RFC 9457 problem body, and lets requests
// pass, logging, when the store fails.
//
// At least one of WithLimits, WithPolicies or WithRule is required. New
// returns an error wrapping ratewarden.ErrInvalidConfig (or ErrInvalidLimit
// for a bad limit) that names the option or field at fault; a nil Option
// is one too.
func New(l *ratewarden.Limiter, opts ...Option) (*Middleware, error) {
	if l == nil {
		return nil, fmt.Errorf("httplimit: limiter must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m := &Middleware{
		lim:         l,
		key:         c.key,
		cost:        c.cost,
		skip:        c.skip,
		shadow:      c.shadow,
		headers:     c.headers,
		denied:      c.denied,
		onErr:       c.onErr,
		onLimit:     c.onLimit,
		failClosed:  c.failClosed,
		log:         c.log,
		countIf:     c.countIf,
		maxInFlight: c.maxInFlight,
		inFlightTTL: c.inFlightTTL,
	}
	if c.ip != nil {
		ip, _ := c.ip.validate() // validated: this is the normalized copy
		m.ip, m.key = &ip, ip.keyFunc()
	}
	for _, r := range c.allRules() {
		m.rules = append(m.rules, compileRule(r, c.headers, c.pkSecret))
	}
	m.register(l)
	return m, nil
}

// compileRule builds the rule r, which validate checked.
func compileRule(r Rule, headers HeaderSet, pkSecret []byte) rule {
	cr := rule{Rule: r}
	cr.Policies, cr.Plans = nil, nil // the compiled plans hold copies; the caller's slices may change
	if len(r.Plans) == 0 {
		p := compilePlan(r.Policies, headers, pkSecret)
		p.prefix = r.Name + "|"
		cr.plans = []*plan{p}
		return cr
	}
	cr.byName = make(map[string]*plan, len(r.Plans))
	for _, pl := range r.Plans {
		p := compilePlan(pl.Policies, headers, pkSecret)
		p.name, p.prefix = pl.Name, r.Name+"|"+pl.Name+"|"
		cr.plans = append(cr.plans, p)
		cr.byName[pl.Name] = p
	}
	return cr
}

// compilePlan builds the plan of policies, which validate checked.
func compilePlan(policies []Policy, headers HeaderSet, pkSecret []byte) *plan {
	p := &plan{policies: append([]Policy(nil), policies...)}
	for i := range p.policies {
		pol := &p.policies[i]
		pol.Name = pol.name()
		p.limits = append(p.limits, pol.Limit)
	}
	p.render = NewRenderer(headers, p.policies...)
	if pkSecret != nil {
		p.render, _ = p.render.WithPartitionKey(pkSecret) // validate checked the secret's length
	}
	return p
}

// Handler returns next wrapped by the limiter.
//
// For each request: when the skip function reports true, or no rule
// matches, next serves it untouched. Otherwise the key, plan and cost are
// computed and the policies checked in one Limiter.AllowAll call
// (Limiter.Reserve under WithCountIf, after a permit is taken under
// WithMaxInFlight); the rate limit headers are set; an allowed request
// (or any request in shadow mode) is passed to next, a denied one to the
// denied handler, after Retry-After is set. Under WithCountIf and
// WithMaxInFlight the reservation is settled and the permit released
// when next returns, or panics.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := m.decide(r, "", false)
		switch {
		case !m.respond(w, r, &o):
		case o.holds():
			m.serve(next, w, r, &o)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// Check applies the rule r matches (as Handler would, WithSkip included)
// to key instead of the key function's answer, for limits a handler can
// only key once it has read the request: the username in a login form,
// say. It writes exactly what Handler writes: the rate limit headers, and
// for a request that is not to proceed the denied or error handler's
// response. It reports whether the handler should go on; when false, the
// response has been written (or, when the client went away, is not
// wanted).
//
// The key counts under the rule's name like the key function's keys do
// ("<rule>|<key>"); give such checks a Middleware of their own, with a
// rule named for them (WithRule), so they never share counters with the
// key function's keys.
//
// Check cannot learn when the handler ends, which WithCountIf and
// WithMaxInFlight need: under either it counts nothing and answers with
// the error handler's response (an error wrapping
// ratewarden.ErrInvalidConfig, 503 by default), logged once. Use
// DecideKey and Verdict.Done there.
func (m *Middleware) Check(w http.ResponseWriter, r *http.Request, key string) bool {
	if m.countIf != nil || m.maxInFlight > 0 {
		err := fmt.Errorf("httplimit: Check cannot settle by outcome (WithCountIf) or hold a permit (WithMaxInFlight), as it does not see the handler end; use DecideKey and Verdict.Done: %w", ratewarden.ErrInvalidConfig)
		if !m.checkLog.Swap(true) {
			m.log.LogAttrs(r.Context(), slog.LevelError, err.Error())
		}
		m.onErr(w, r, err)
		return false
	}
	o := m.decide(r, key, true)
	return m.respond(w, r, &o)
}

// respond writes what the middleware writes for o and reports whether the
// request is to proceed to the next handler.
func (m *Middleware) respond(w http.ResponseWriter, r *http.Request, o *outcome) bool {
	switch {
	case o.canceled:
		// The client went away while the store was asked: nobody waits for
		// a response, and the store is not to blame.
		return false
	case o.err != nil && !o.proceed:
		m.onErr(w, r, o.err)
		return false
	case o.err == nil && o.pl != nil:
		setHeaders(w.Header(), o.pl.render, o.decision(), o.rejected(), o.key, o.inflight)
	}
	if o.proceed {
		return true
	}
	m.denied(w, r, o.info())
	return false
}

func (m *Middleware) match(r *http.Request) *rule {
	for i := range m.rules {
		if ru := &m.rules[i]; ru.Match == nil || ru.Match(r) {
			return ru
		}
	}
	return nil
}

// storeFailed handles an error from the store that no failure policy
// turned into a Result: it reports whether the request passes (the
// default) or gets the error handler's response (WithFailClosed). The
// error text goes to the log, never to the client. Log lines are limited
// to one a second, counting the ones left out, so an outage does not flood
// the log.
func (m *Middleware) storeFailed(r *http.Request, key string, err error) bool {
	if n, ok := m.storeLog.take(time.Now()); ok {
		action := "request allowed (fail open)"
		if m.failClosed {
			action = "request rejected with 503 (fail closed)"
		}
		m.log.LogAttrs(r.Context(), slog.LevelError, "httplimit: rate limit store failed; "+action,
			slog.String("key", key), slog.Int64("errors", n), slog.Any("error", err))
	}
	return !m.failClosed
}

// logThrottle lets one log line a second through and counts the events
// since the last line, so a flood of events does not flood the log.
type logThrottle struct {
	last  atomic.Int64 // unix nanos of the last line
	count atomic.Int64 // events since then
}

// take records an event at now and reports whether to log it, with the
// number of events the line stands for.
func (t *logThrottle) take(now time.Time) (int64, bool) {
	n := t.count.Add(1)
	ns, last := now.UnixNano(), t.last.Load()
	if ns-last < int64(time.Second) || !t.last.CompareAndSwap(last, ns) {
		return 0, false
	}
	t.count.Add(-n)
	return n, true
}

func bindingName(p *plan, d ratewarden.Decision) string {
	b := d.Binding()
	for i, lim := range p.limits {
		if lim == b.Limit {
			return p.policies[i].Name
		}
	}
	return ""
}

// ProxyWarnings counts the requests that showed one of the
// misconfigurations WithClientIP checks for (each also logged once, as a
// Warn line, the first time). Both stay zero under WithKey.
type ProxyWarnings struct {
	// NoForwardHeader counts requests from a trusted proxy that carried
	// no IPConfig.Header: all such requests share the proxy's budget.
	NoForwardHeader int64
	// UntrustedForwardHeader counts requests that carried a forwarding
	// header while IPConfig.TrustedProxies is empty, so it was ignored.
	UntrustedForwardHeader int64
}

// ProxyWarnings returns the counts of requests that showed each
// forwarding misconfiguration so far; export them as metrics.
func (m *Middleware) ProxyWarnings() ProxyWarnings {
	return ProxyWarnings{NoForwardHeader: m.noForward.Load(), UntrustedForwardHeader: m.untrustFwd.Load()}
}

// canonicalForward are forwardHeaderNames as http.Header keys them, so
// the checks look them up without canonicalizing per request.
var canonicalForward = func() (c [numForwardHeaders]string) {
	for i, n := range forwardHeaderNames {
		c[i] = http.CanonicalHeaderKey(n)
	}
	return c
}()

// checkProxy counts (and the first time logs) a request that shows the
// ClientIP configuration does not match the network: see WithClientIP.
func (m *Middleware) checkProxy(r *http.Request) {
	c := m.ip
	if len(c.TrustedProxies) == 0 {
		for _, name := range canonicalForward {
			if len(r.Header[name]) > 0 {
				if m.untrustFwd.Add(1) == 1 {
					m.log.LogAttrs(r.Context(), slog.LevelWarn, "httplimit: a request carries a forwarding header but no proxy is trusted, so it is ignored and the request is keyed by its TCP peer; "+
						"if this server is behind a proxy, every client shares the proxy's budget: list the proxy's network in IPConfig.TrustedProxies (WithClientIP)",
						slog.String("header", name))
				}
				return
			}
		}
		return
	}
	if len(r.Header[canonicalForward[c.Header]]) > 0 {
		return
	}
	if peer, ok := clientip.ParseHop(r.RemoteAddr); ok && clientip.Trusted(c.TrustedProxies, peer) {
		if m.noForward.Add(1) == 1 {
			m.log.LogAttrs(r.Context(), slog.LevelWarn, "httplimit: a request from a trusted proxy carries no "+forwardHeaderNames[c.Header]+" header, so it is keyed by the proxy's address; "+
				"if the proxy never sends it, every client shares the proxy's budget: make the proxy set the header, or set IPConfig.Header to the one it writes",
				slog.String("header", forwardHeaderNames[c.Header]))
		}
	}
}
