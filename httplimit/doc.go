// Package httplimit is net/http middleware that rate limits requests with a
// ratewarden.Limiter: with a Redis-backed Limiter, every replica of a
// service behind a load balancer enforces one shared limit.
//
//	lim, err := ratewarden.New(store)
//	if err != nil {
//		return err
//	}
//	mw, err := httplimit.New(lim,
//		httplimit.WithLimits(ratewarden.PerSecond(10), ratewarden.PerDay(10_000)))
//	if err != nil {
//		return err
//	}
//	return http.ListenAndServe(":8080", mw.Handler(mux))
//
// Middleware.Handler is standard func(http.Handler) http.Handler middleware
// (chi: r.Use(mw.Handler)). For each request it finds the first matching
// rule (WithRule, then the default rule of WithLimits), keys the request
// (WithKey; default the TCP peer's address, ClientIP), checks the rule's
// limits in one atomic Limiter.AllowAll call (a request denied by one limit
// consumes nothing from the others), sets the rate limit headers and passes
// the request on, or answers 429 with Retry-After and an RFC 9457 body of
// the draft's quota-exceeded problem type.
//
// Behind proxies, list them in IPConfig.TrustedProxies (WithClientIP): a
// forwarding header from anyone else is ignored, so clients cannot choose
// their own key. A trusted proxy that sends no forwarding header, or such
// headers arriving while no proxy is trusted, are logged once and counted
// (Middleware.ProxyWarnings).
//
// Renderer renders the headers (the IETF draft's RateLimit-Policy and
// RateLimit, whose t never passes Retry-After on a rejection; X-RateLimit-*
// with a Unix-time reset; Retry-After) for any Decision, so services that
// decide on their own answer like the middleware. WithShadow counts and
// reports without denying. A store error that no failure policy (package
// fallback) turned into a Result lets the request pass and is logged
// (WithFailClosed: 503); its text never reaches the client.
//
// WithCountIf counts a request only when its response matches: with
// Failed, only statuses of 400 and up, so "5 failed logins per 15 minutes"
// never locks out a user who logs in. The cost is reserved before the
// handler runs (Limiter.Reserve) and given back after it when the
// response does not count, so the decision stays one atomic step on the
// shared store, and requests in flight count until they end.
// WithMaxInFlight caps the requests of a key in flight on all replicas
// together (Limiter.Acquire): each holds a permit while its handler runs,
// and the permits of a replica that crashes expire after a ttl.
//
// WithLimitFunc (or Rule.Plans) picks the limits per request from a fixed
// set of plans, each counted on keys of its own. Middleware.Reset and Peek
// (and ResetKey, PeekKey by client key) clear or read a client's counters
// without knowing the key format; Middleware.Check applies a rule to any
// key from inside a handler, writing what Handler writes. Decide returns
// the decision as a Verdict for adapters to other frameworks (modules
// under adapters/: gin, echo, fiber, gRPC). New warns once when another
// Middleware on the same Limiter counts on the same keys.
//
// docs/middleware.md explains keys, rules, headers, counting by outcome,
// in-flight caps, shadow mode and store failures at length.
package httplimit
