package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
)

// A Policy is one limit as it is advertised to clients: the RateLimit and
// RateLimit-Policy headers list each policy under its Name.
type Policy struct {
	// Name identifies the policy in the headers: printable ASCII, at most
	// 64 bytes. Empty means the limit's String form, e.g. "100/1m".
	Name  string
	Limit ratewarden.Limit
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
	// (algorithm and period).
	Policies []Policy
}

// DefaultRuleName is the name of the rule WithLimits and WithPolicies
// configure.
const DefaultRuleName = "default"

// Info describes one decision the middleware made. Handlers and callbacks
// must not modify it (Policies is shared by all requests of the rule) nor
// retain it after they return.
type Info struct {
	// Rule is the name of the rule that matched.
	Rule string
	// Key is the key checked: "<rule>|<client key>".
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

	storeLog  logThrottle // store errors
	shadowLog logThrottle // over-limit requests passed in shadow mode

	ip         *IPConfig    // WithClientIP (or the default key): checked per request; nil: no checks
	noForward  atomic.Int64 // trusted peer without the forwarding header
	untrustFwd atomic.Int64 // forwarding header while no proxy is trusted
}

// rule is a validated Rule with its header renderer.
type rule struct {
	Rule
	limits []ratewarden.Limit
	render *Renderer
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
	c := defaults()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("httplimit: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := &Middleware{
		lim:        l,
		key:        c.key,
		cost:       c.cost,
		skip:       c.skip,
		shadow:     c.shadow,
		headers:    c.headers,
		denied:     c.denied,
		onErr:      c.onErr,
		onLimit:    c.onLimit,
		failClosed: c.failClosed,
		log:        c.log,
		ip:         c.ip,
	}
	rules := append(c.rules, c.defaultRules...)
	if len(rules) == 0 {
		return nil, fmt.Errorf("httplimit: no limits configured (use WithLimits, WithPolicies or WithRule): %w", ratewarden.ErrInvalidConfig)
	}
	seen := make(map[string]bool, len(rules))
	for _, r := range rules {
		if seen[r.Name] {
			return nil, fmt.Errorf("httplimit: rule %q given twice: %w", r.Name, ratewarden.ErrInvalidConfig)
		}
		seen[r.Name] = true
		cr, err := compileRule(r, c.headers, c.pkSecret)
		if err != nil {
			return nil, err
		}
		m.rules = append(m.rules, cr)
	}
	return m, nil
}

func compileRule(r Rule, headers HeaderSet, pkSecret []byte) (rule, error) {
	switch {
	case r.Name == "":
		return rule{}, fmt.Errorf("httplimit: Rule.Name must not be empty: %w", ratewarden.ErrInvalidConfig)
	case strings.ContainsRune(r.Name, '|'):
		return rule{}, fmt.Errorf("httplimit: rule %q: Rule.Name must not contain '|' (it separates the rule from the client key): %w", r.Name, ratewarden.ErrInvalidConfig)
	case len(r.Policies) == 0:
		return rule{}, fmt.Errorf("httplimit: rule %q: Rule.Policies must not be empty: %w", r.Name, ratewarden.ErrInvalidConfig)
	}
	cr := rule{Rule: r}
	cr.Policies = append([]Policy(nil), r.Policies...) // the caller's slice may change
	names := make(map[string]bool, len(r.Policies))
	for i := range cr.Policies {
		p := &cr.Policies[i]
		if err := p.Limit.Validate(); err != nil {
			return rule{}, fmt.Errorf("httplimit: rule %q: policy %d: %w", r.Name, i, err)
		}
		if p.Name == "" {
			p.Name = p.Limit.String()
		}
		if err := validPolicyName(p.Name); err != nil {
			return rule{}, fmt.Errorf("httplimit: rule %q: policy %d: Policy.Name %w", r.Name, i, err)
		}
		if names[p.Name] {
			return rule{}, fmt.Errorf("httplimit: rule %q: policy name %q given twice: %w", r.Name, p.Name, ratewarden.ErrInvalidConfig)
		}
		names[p.Name] = true
		for j := range i {
			if cr.Policies[j].Limit.Scope() == p.Limit.Scope() {
				return rule{}, fmt.Errorf("httplimit: rule %q: policies %d and %d share the scope %s (algorithm and period); give each a different one: %w", r.Name, j, i, p.Limit.Scope(), ratewarden.ErrInvalidLimit)
			}
		}
		cr.limits = append(cr.limits, p.Limit)
	}
	cr.render = NewRenderer(headers, cr.Policies...)
	if pkSecret != nil {
		pr, err := cr.render.WithPartitionKey(pkSecret)
		if err != nil {
			return rule{}, err
		}
		cr.render = pr
	}
	return cr, nil
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

// Handler returns next wrapped by the limiter.
//
// For each request: when the skip function reports true, or no rule
// matches, next serves it untouched. Otherwise the key and cost are
// computed and the rule's policies checked in one Limiter.AllowAll call;
// the rate limit headers are set; an allowed request (or any request in
// shadow mode) is passed to next, a denied one to the denied handler,
// after Retry-After is set.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	ru := m.match(r)
	if ru == nil {
		next.ServeHTTP(w, r)
		return
	}
	if m.ip != nil {
		m.checkProxy(r)
	}
	ck, err := m.key(r)
	if err == nil && ck == "" {
		err = fmt.Errorf("httplimit: key function returned an empty key: %w", ratewarden.ErrInvalidKey)
	}
	if err != nil {
		m.onErr(w, r, err)
		return
	}
	cost, err := m.cost(r)
	if err != nil {
		if !errors.Is(err, ratewarden.ErrInvalidCost) {
			err = fmt.Errorf("httplimit: cost function: %w: %w", err, ratewarden.ErrInvalidCost)
		}
		m.onErr(w, r, err)
		return
	}
	key := ru.Name + "|" + ck
	var d ratewarden.Decision
	var one [1]ratewarden.Result
	if len(ru.limits) == 1 {
		// The same atomic check; AllowN does not allocate.
		one[0], err = m.lim.AllowN(r.Context(), key, ru.limits[0], cost)
		d = ratewarden.Decision{Allowed: one[0].Allowed, Results: one[:]}
	} else {
		d, err = m.lim.AllowAll(r.Context(), key, cost, ru.limits...)
	}
	switch ratewarden.Classify(r.Context(), err) {
	case ratewarden.InvalidInput:
		m.onErr(w, r, err)
		return
	case ratewarden.CallerCanceled:
		// The client went away while the store was asked: nobody waits for
		// a response, and the store is not to blame.
		return
	case ratewarden.StoreUnavailable, ratewarden.KeyState:
		m.storeFailed(w, r, next, key, err)
		return
	}
	ru.render.SetKey(w.Header(), d, !d.Allowed && !m.shadow, key)
	if d.Allowed {
		next.ServeHTTP(w, r)
		return
	}
	// Results may live on this stack frame: the handlers get their own copy.
	own := ratewarden.Decision{Allowed: d.Allowed, Results: append([]ratewarden.Result(nil), d.Results...)}
	info := Info{Rule: ru.Name, Key: key, Cost: cost, Policies: ru.Policies, Decision: own, Shadow: m.shadow}
	if m.onLimit != nil {
		m.onLimit(r, info)
	}
	if m.shadow {
		if n, ok := m.shadowLog.take(time.Now()); ok {
			m.log.LogAttrs(r.Context(), slog.LevelInfo, "httplimit: shadow mode: request over the limit passed",
				slog.String("rule", ru.Name), slog.String("key", key), slog.String("policy", bindingName(ru, d)), slog.Int64("requests", n))
		}
		next.ServeHTTP(w, r)
		return
	}
	m.denied(w, r, info)
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
// turned into a Result: the request passes (default) or gets a 503. The
// error text goes to the log, never to the client. Log lines are limited to
// one a second, counting the ones left out, so an outage does not flood the
// log.
func (m *Middleware) storeFailed(w http.ResponseWriter, r *http.Request, next http.Handler, key string, err error) {
	if n, ok := m.storeLog.take(time.Now()); ok {
		action := "request allowed (fail open)"
		if m.failClosed {
			action = "request rejected with 503 (fail closed)"
		}
		m.log.LogAttrs(r.Context(), slog.LevelError, "httplimit: rate limit store failed; "+action,
			slog.String("key", key), slog.Int64("errors", n), slog.Any("error", err))
	}
	if m.failClosed {
		m.onErr(w, r, err)
		return
	}
	next.ServeHTTP(w, r)
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

func bindingName(ru *rule, d ratewarden.Decision) string {
	b := d.Binding()
	for i, lim := range ru.limits {
		if lim == b.Limit {
			return ru.Policies[i].Name
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
	if peer, ok := parseHop(r.RemoteAddr); ok && c.trusted(peer) {
		if m.noForward.Add(1) == 1 {
			m.log.LogAttrs(r.Context(), slog.LevelWarn, "httplimit: a request from a trusted proxy carries no "+forwardHeaderNames[c.Header]+" header, so it is keyed by the proxy's address; "+
				"if the proxy never sends it, every client shares the proxy's budget: make the proxy set the header, or set IPConfig.Header to the one it writes",
				slog.String("header", forwardHeaderNames[c.Header]))
		}
	}
}
