// Package telemetry holds what the server measures and traces of its
// decisions: the Prometheus series (Metrics: decisions, degraded
// decisions, store latency and errors, reloads, problems, near-limit
// hits, permits and settlements, the breaker states), the per-policy
// Series a decision counts through without hashing labels, and Meter,
// the Store decorator every failure policy's Limiter decides on: it
// times and counts each store call by op and failure policy and, with a
// tracer, gives it a span.
//
// Labels name APIs, domains, policies and descriptor paths from the
// config, never a caller's key or a request's values; spans carry no
// key either.
//
// It sits at the bottom of the server's packages: of the project it
// imports the root package and fallback (the failure policy and breaker
// state types) only, and nothing of the service.
package telemetry
