// Package rls is the server's Envoy rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) and envoyproxy/ratelimit's
// HTTP face of it, /json: a Service decides a request's descriptors as
// envoyproxy/ratelimit documents them, on the Envoy domains of the
// configuration in force.
//
// What lives here: validating a request before any store call (Codec
// turns invalid UTF-8 into INVALID_ARGUMENT), resolving each descriptor
// against its domain's tree (the plan derived from the config once, when
// it is put in force: store key prefixes, limits, labels, header
// renderers), limit overrides, grouping the descriptors into atomic units
// and deciding them through the Limiters as one request, rendering the
// answer (statuses, ratewarden's or envoyproxy/ratelimit's headers,
// dynamic metadata: EnvoyCompat), near-limit counts and the span of each
// call.
//
// Of the project it imports the root package, fallback, httplimit (the
// header renderer), service/config, decide and telemetry; only the server,
// which registers the Service on its gRPC server and /json on its HTTP
// mux, imports it.
package rls
