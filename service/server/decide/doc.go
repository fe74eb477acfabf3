// Package decide holds what the server's two APIs, the HTTP API (package
// api) and the Envoy rate limit service (package rls), share to decide:
//
//   - Backend, what hands the server a store per failure policy and says
//     whether the shared store is ready;
//   - Limiters, the one ratewarden.Limiter per failure policy every
//     decision goes through, built on the backend's stores and metered
//     (telemetry.Meter);
//   - Failure, how a limit's failure policy is resolved (its own, its
//     domain's, the config's top level, the server default);
//   - the rate limit header set both answer with (DraftSet), and
//     KeyHash and Redact, which keep callers' keys out of logs.
//
// The server decides through *ratewarden.Limiter only: nothing here
// builds a store or calls one itself. Of the project it imports the root
// package, fallback, httplimit, internal/nilcheck, service/config and
// telemetry; the APIs and the server import it.
package decide
