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
// Middleware.Handler has the standard func(http.Handler) http.Handler
// shape, so it works with net/http, chi (r.Use(mw.Handler)) and any router
// that takes standard middleware. New returns a *Middleware rather than the
// bare function so that configuration errors surface at startup and the
// value can grow methods without breaking callers.
//
// # Keys: who is the client?
//
// A KeyFunc names the client a request counts against. The default,
// ClientIP(IPConfig{}), is the TCP peer's address. Behind a load balancer
// or CDN, list the proxies' networks in IPConfig.TrustedProxies and name the
// one header they write (X-Forwarded-For, Forwarded or X-Real-IP): the
// header is then walked from the right, past the trusted proxies, to the
// first hop that is not one. A header from anyone else is ignored, so
// clients cannot choose their key by sending it; trusting it
// unconditionally is the classic way to make every limit bypassable. IPv6
// clients are grouped by /64 by default, as one host usually controls at
// least that.
//
// Header keys by an API key (hashed), Pattern by the ServeMux route, Static
// gives one global budget, Join combines keys (route and client) and
// FirstOf falls back from one key to another. Any func(*http.Request)
// (string, error) will do.
//
// # Limits
//
// WithLimits sets the limits every request is checked against; several
// limits (10 per second and 10,000 per day) are checked in one atomic
// Limiter call, and a request denied by one consumes nothing from the
// others. WithRule adds per-route limits with their own counters.
// WithCost gives requests a weight.
//
// # Responses
//
// Allowed and denied responses carry the rate limit headers (WithHeaders):
// by default the IETF draft's RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers, one item per policy) and the
// X-RateLimit-Limit, -Remaining and -Reset headers for the binding policy.
// A denied request gets 429 Too Many Requests with Retry-After in whole
// seconds, rounded up so that a client that waits that long is not early,
// and an RFC 9457 application/problem+json body (WithDeniedHandler to
// change it). In shadow mode (WithShadow) nothing is denied: over-limit
// requests are reported and passed on.
//
// # When the store fails
//
// Wrap the Limiter's store in package fallback to choose what happens
// during a Redis outage (fail open, fail closed, or an in-process share of
// the limit): its answers arrive as degraded Results and are honoured like
// any other. A store error that reaches the middleware anyway lets the
// request pass and is logged, at most once a second (WithFailClosed(true)
// answers 503 instead). No error text is ever sent to the client.
package httplimit
