// Package api is the server's HTTP API: the /v1 endpoints that check,
// peek and reset a caller's key against a policy of the config (or an
// inline limit, when the operator allows them), reserve units and settle
// them once the cost is known, and acquire, release and extend permits of
// concurrency policies.
//
// What lives here: the request and answer bodies (CheckRequest, Decision,
// Reservation, Acquisition, ...) and their strict decoding (one JSON
// object, exact member names, valid UTF-8, bounded size), the problem
// responses (application/problem+json, one type per kind of error, whose
// detail describes the caller's request and never the server), the
// tokens handed out for reservations (signed) and permits, the bearer
// token check (Guard), and the plan of the HTTP policies derived from the
// configuration in force. Every decision goes through the Limiters.
//
// Of the project it imports the root package, fallback, httplimit (the
// header renderer and problem writer), service/config, decide and
// telemetry. The server mounts it (Register, Guard, Only, NotFound);
// clients of the API (ratewarden check, the demo) import it for its
// bodies.
package api
