// Package stack assembles the recommended Redis store: the one place that
// puts ratewarden's stores and decorators together, in this order from the
// Limiter down:
//
//	ratewarden.Limiter      validates every request, once
//	  failure policy        package fallback: deadline, circuit breaker,
//	                        FailOpen / FailClosed / LocalFallback
//	    deny cache          package denycache: exact local cache of denials
//	      leases            package lease, off unless WithLeases
//	        script store    package redisstore: one Lua script per check,
//	                        micro-batched
//
//	st, err := stack.New(client, // a rueidis.Client
//		stack.WithFallback(fallback.WithPolicy(fallback.LocalFallback), fallback.WithReplicas(4)))
//	if err != nil {
//		return err
//	}
//	lim, err := ratewarden.New(st)
//
// The failure policy is outermost so that it bounds and guards everything
// below it; the deny cache sits under it so that a cached denial costs no
// deadline, and because the breaker counts its answers neither way. The
// deny cache is on by default (WithDenyCache sizes it, 0 turns it off).
// Leases wrap the script store itself, whose client they run their own
// script on; the deny cache above them remembers the denials of leased and
// plain checks alike, and a Reset through the Stack reaches every layer.
// On a Redis Cluster client the failure policy keeps one circuit breaker
// per primary, as the cluster's slot map says (CLUSTER SLOTS, read again
// at most once per WithTopologyRefresh), through fallback.NewPartitioned
// and redisstore.Slot: a failed primary degrades only the keys it holds,
// and after a failover its slots go to the promoted replica's own, fresh
// breaker. WithSlotGroups opts into fixed groups of slots instead.
//
// A Stack is a ratewarden.Store deciding through its default front, the
// failure policy WithFallback configures. NewFront adds more fronts over
// the same script store and deny cache, each with its own policy and
// breakers: a service that lets every limit choose fail_open, fail_closed
// or local_fallback makes one front per policy and one Stack.
//
// Limiter.Wait, Limiter.Reserve and Limiter.Acquire work on a Stack, and
// on every Front, through the same layers. Reservations (Wait)
// and refundable checks (Reserve) are decided by Redis only: the deny
// cache and leases never answer them, since a refund on any replica can
// free capacity at any moment. Settlements (Charge) go through the failure
// policy; when Redis cannot take one it counts in the front's local shares
// and is written back when Redis returns, with the outage's LocalFallback
// admissions. Concurrency limits (Acquire, Release, Extend) are held in
// Redis; during an outage the front's policy answers, LocalFallback with
// this replica's share of the permits. docs/failure.md has the details.
//
// A Stack does not own its Redis client: call Close (which gives leased
// units back), then close the client. docs/architecture.md follows one
// request through the layers.
package stack
