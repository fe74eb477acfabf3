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
// # Micro-batching
//
// The script decides a list of checks in one execution, and the Store uses
// that (on by default; WithBatching(false) turns it off): while
// WithBatchLanes script calls (default 2) are in flight, further checks
// wait in a queue, and when a call returns, up to WithBatchSize queued
// checks (default 64) go out together as one EVALSHA. Each check in a batch
// is still decided atomically, all-or-nothing over its own limits, with its
// own result; the checks of a batch run one after another in one script
// execution, on one reading of Redis TIME. A check that finds a free lane
// goes out at once from the caller's goroutine, so batching adds no delay
// at low load, and sequential callers make one script call per check. At
// high load it cuts Redis CPU per check (one EVALSHA, one TIME, one reply
// for many checks) and the number of commands Redis parses.
//
// A caller whose context ends while its check is queued returns at once
// with the context's error, and the check is never sent. A check already
// sent is decided by Redis whatever happens to its caller: as with any
// network call, a check that returned a context error may still have been
// counted. A batch call carries no single caller's cancellation; its
// deadline is the latest of its callers' deadlines (none if one has none).
// An error of a batch call (a network failure) is returned to every check
// in it. A key holding a value of the wrong type or a malformed state fails
// only its own check, which writes nothing (every read of a check comes
// before its first write); the other checks of the batch are decided.
//
// On Redis Cluster (a rueidis cluster client, or a go-redis ClusterClient
// or Ring) only checks whose keys share a slot could share a call, so the
// Store does not batch there: every check is its own script call, and
// rueidis' auto-pipelining still shares round trips per node.
//
// # Deny cache
//
// A Store remembers the denials Redis made, in a bounded local cache
// (package denycache; WithDenyCache sets its size, 0 turns it off): until a
// denial's RetryAfter has passed, single-limit checks of that key and limit
// with at least the denied cost are denied on this replica without a
// script call, with Source ratewarden.SourceCache. It is exact — it only
// repeats Redis' own denials and never admits — except that a Reset made
// through another replica is not seen here until the RetryAfter has run.
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
// microseconds held in Lua doubles, with exact arithmetic (lua/arith.lua:
// products beyond 2^53 are multiplied and divided exactly); a differential
// test runs random sequences through both and compares every result and
// the stored state.
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
// Checks that write nothing leave the expiry alone. A window or token
// bucket costs one GET and, when the check consumes, one SET that writes
// the state and its expiry together (SET ... PXAT): no separate EXPIRE.
// A check with one limit is decided in one pass; a multi-limit check reads
// every limit's verdict first and writes only when all admit.
package redisstore
