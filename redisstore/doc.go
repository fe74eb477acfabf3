// Package redisstore is a ratewarden.Store on Redis (standalone, Sentinel
// or Cluster, 6.2 or later), so that every replica of a service shares one
// count per key.
//
// Make it with New on a rueidis client, or NewGoRedis on an existing go-redis
// v9 client, and hand it to ratewarden.New.
//
// # Guarantees
//
// Every Check is one execution of one Lua script (EVALSHA, and EVAL when
// Redis answers NOSCRIPT, for example after SCRIPT FLUSH or a restart), so
// a check is atomic: all limits of the key, the cost and the expiry are
// decided and written together, never read-then-write from Go. The script
// takes "now" from Redis TIME; the Store has no clock, so replicas whose
// clocks disagree still agree on every decision, RetryAfter and ResetAfter.
// A check that any limit rejects consumes nothing from any limit; Peek and
// cost 0 write nothing. Bad input is rejected before Redis is called.
// Redis and network errors wrap ratewarden.ErrStoreUnavailable; if the
// caller's context ended, the error also wraps context.Canceled or
// context.DeadlineExceeded.
//
// # Keys
//
// The state of a key under a limit lives at
//
//	<prefix>{<tag>}:<algorithm>:<period>
//
// for example rw:{user:42}:fixed_window:1m, where <algorithm>:<period> is
// Limit.Scope. The tag is the caller's key as is (keys are binary-safe),
// unless it is longer than MaxKeyLen bytes, contains '{' or '}', or starts
// with '#': then it is '#' and the hex of the first 16 bytes of the key's
// SHA-256. So the hash tag cannot be broken, a key's length is bounded, and
// all limits of one key fall in one Cluster slot (no CROSSSLOT). The prefix
// (WithPrefix, default "rw:") must not contain braces. Store.Key returns
// the name.
//
// # Script
//
// lua/check.lua mirrors internal/algo operation for operation, in integer
// microseconds held in Lua doubles; a differential test runs random
// sequences through both and compares every result and the stored state.
// It evaluates a list of checks, so that concurrent checks can share one
// call; each check runs every limit without consuming and, only when all
// admit (and it is not a peek and the cost is not 0), again consuming. Its
// arguments are, per check, the cost, the peek flag, the number of limits
// and, per limit, the algorithm, rate, period (µs) and capacity, with one
// key per limit in KEYS. It replies with integers only: the instant it
// decided at, then per limit allowed, remaining, retry-after and
// reset-after (µs).
//
// # State and expiry
//
// Every write sets the key's expiry in the same script, at the instant the
// algorithm's state becomes equivalent to no state, rounded up to the
// millisecond. So no key lives forever, and a key's remaining TTL is at
// most:
//
//   - FixedWindow: one string "start count 0"; the period.
//   - SlidingWindow: one string "start curr prev"; twice the period.
//   - TokenBucket: the theoretical arrival time as a string; the time to
//     refill a full bucket (Capacity × Period / Rate), rounded up to the
//     millisecond, plus 1 ms; ratewarden.Limit.Validate bounds it by
//     ratewarden.MaxPeriod.
//   - SlidingLog: a sorted set with one member per admitted unit, scored by
//     its instant; the period plus 1 ms.
//
// Checks that write nothing leave the expiry alone.
package redisstore
