// Package ratewarden is a distributed rate limiter: every replica of a
// service asks one shared, atomic source of truth whether a request may
// pass, so "100 per minute per client" means 100 in total, not 100 per
// replica.
//
// A Limiter checks a key against one or more Limits on a Store. The Store
// is the seam: memstore keeps state in process (one replica, tests, a local
// fallback), redisstore keeps it in Redis (standalone, Sentinel or
// Cluster), and decorators such as fallback wrap one Store in another.
//
//	store, err := redisstore.New(client) // client: a rueidis.Client
//	if err != nil {
//		return err
//	}
//	lim, err := ratewarden.New(store)
//	if err != nil {
//		return err
//	}
//	res, err := lim.Allow(ctx, "user:42", ratewarden.PerMinute(100))
//	if err != nil {
//		return err // bad input, or the store is unavailable
//	}
//	if !res.Allowed {
//		// 429: retry after res.RetryAfter
//	}
//
// The redisstore and memstore examples are whole programs.
//
// # Guarantees
//
//  1. One atomic decision per check. Every check — all limits of one key,
//     the cost, the TTL — is one Lua script execution in Redis. Nothing is
//     read and then written from Go.
//  2. One clock. Redis-backed decisions take "now" from Redis TIME
//     (microseconds); a replica's own clock never decides, so skewed hosts
//     agree. RetryAfter and ResetAfter come from the same clock.
//  3. Exact limits under concurrency. Any number of replicas and goroutines
//     on one key admit exactly the limit for FixedWindow, SlidingLog and
//     TokenBucket. SlidingWindow is the documented weighted approximation:
//     it rounds against the caller, never admits more than Rate within one
//     epoch-aligned window, and admits fewer than 2 × Rate in any sliding
//     span of Period even in the worst case (all of the previous window's
//     traffic at its very end); under steady traffic, Rate − 1 per window.
//     A limit that names no algorithm is exact below 100 per period
//     (DefaultAlgorithm).
//  4. Every key expires. Every write sets a TTL no longer than the
//     algorithm needs (FixedWindow: Period; SlidingWindow: 2 × Period;
//     TokenBucket: Capacity × Period / Rate; SlidingLog: Period), so no key
//     lives forever, whatever crashes when.
//  5. Rejected requests consume nothing, and a multi-limit check rejected by
//     one limit consumes nothing from the others.
//  6. Redis trouble is a policy, not an outage (package fallback): a
//     per-call deadline, a circuit breaker, and FailOpen, FailClosed or
//     LocalFallback chosen up front. Results say when they are degraded.
//  7. Bad input gets a clear error and changes nothing: invalid limits,
//     costs and keys are rejected before any store call, with an error
//     wrapping ErrInvalidLimit, ErrInvalidCost or ErrInvalidKey that names
//     the field.
//
// Over the limit is a Result with Allowed false, never an error. Errors mean
// bad input or an unavailable store (ErrStoreUnavailable).
package ratewarden
