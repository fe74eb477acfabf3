// Package ratewarden is a distributed rate limiter: every replica of a
// service asks one shared, atomic source of truth whether a request may
// pass, so "100 per minute per client" means 100 in total, not 100 per
// replica.
//
// A Limiter checks keys against Limits on a Store: memstore keeps state in
// process, redisstore in Redis (standalone, Sentinel or Cluster), and
// package stack assembles the recommended Redis store with its failure
// policy. The Limiter validates every input once, before any store call.
//
//	lim, err := ratewarden.New(store)
//	if err != nil {
//		return err
//	}
//	res, err := lim.Allow(ctx, "user:42", ratewarden.PerMinute(100))
//	if err != nil {
//		return err // bad input, or the store is unavailable: see Classify
//	}
//	if !res.Allowed {
//		// 429: retry after res.RetryAfter
//	}
//
// AllowAll checks several limits of one key in one atomic step; AllowKeys
// decides several keys as one request (atomic per key, nothing consumed
// when one denies). Over the limit is a Result, never an error.
//
// Beyond admission, with the same guarantees on every store of this
// module: Wait blocks until units are admitted (outbound throttling on a
// quota shared by every replica; token buckets reserve, so waiters are
// served in order with one store call each); Reserve admits a cost on an
// estimate and Reservation.Settle charges or gives back the difference
// once the actual cost is known (tokens of an LLM completion, failed
// logins only); Acquire holds one of at most max permits of a key across
// all replicas (work in flight), each expiring after its ttl so a crashed
// replica's permits come back.
//
// # Guarantees
//
//  1. One atomic decision per check: all limits of a key, the cost and the
//     TTL are one Lua script execution in Redis.
//  2. One clock: Redis-backed decisions, RetryAfter and ResetAfter take
//     "now" from Redis TIME, never a replica's clock.
//  3. Exact limits under concurrency for FixedWindow, SlidingLog and
//     TokenBucket; SlidingWindow is a weighted approximation that rounds
//     against the caller (docs/algorithms.md).
//  4. Every key expires, after no longer than its algorithm needs.
//  5. Rejected requests consume nothing, from any limit of the check.
//  6. Redis trouble is a policy, not an outage (package fallback): FailOpen,
//     FailClosed or LocalFallback, and Results say when they are degraded.
//  7. Bad input gets an error naming the field (ErrInvalidLimit,
//     ErrInvalidCost, ErrInvalidKey) and changes nothing.
package ratewarden
