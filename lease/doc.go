// Package lease is lease mode for hot keys: a ratewarden.Store decorator
// over a *redisstore.Store that answers checks from capacity this replica
// took out of Redis in batches, so a key checked thousands of times a
// second costs Redis one script call per batch instead of one per check.
//
//	store, err := redisstore.New(client)
//	...
//	leased, err := lease.New(store, lease.WithSize(50))
//	...
//	defer leased.Close(ctx) // gives unused units back
//	limiter, err := ratewarden.New(leased)
//
// A check of a leased limit is answered from this replica's lease when it
// holds enough units. Otherwise one script call (redisstore.Lender.Take)
// atomically takes up to WithSize units, at least the ones the check
// needs, from the key's state in Redis: the same state, format and expiry
// plain checks use, so leases and plain checks share one count. Leases
// work for FixedWindow and TokenBucket limits in single-limit checks with
// a cost above 0; every other check (and every limit WithFilter leaves
// out) goes to the Store as usual.
//
// Nothing is admitted that Redis did not count: a unit is counted when it
// is leased, used or not, so all replicas together never admit more than
// the limit. A fixed window's units are used only within their window; a
// token bucket's unit only until the instant GCRA would have admitted it.
// The price is under-admission: units one replica holds cannot be used by
// another, at most one lease per replica and key. docs/leases.md says why
// this is exact, what is lost and when, and how Reset and Close behave.
//
// Reservations (ratewarden.Request.MaxDelay, Limiter.Wait) and refundable
// checks (Limiter.Reserve), for which Request.Cacheable reports false,
// never use leases or a remembered denial: a refund on any replica can
// free capacity at any moment, so only Redis decides them. Charge (costs
// settled afterwards) and concurrency limits (Limiter.Acquire) go to the
// script store as they are; a refund through Charge also makes this
// replica forget the denial it remembered for the key and limit.
//
// Admissions from a lease have Source ratewarden.SourceLease, denials
// remembered from Redis (until their RetryAfter) SourceCache, and the
// decisions of a script call SourceStore.
//
// Like every Store, a lease Store relies on the Limiter's validation: a
// Request handed to Check directly must pass ratewarden.ValidateRequest.
// It starts no goroutines. Call Close when done, before closing the Redis
// client.
package lease
