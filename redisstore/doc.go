// Package redisstore is a ratewarden.Store on Redis (standalone, Sentinel
// or Cluster, 6.2 or later), so that every replica of a service shares one
// count per key. It is the script store alone: package stack puts the deny
// cache and a failure policy in front of it, the setup to run in
// production.
//
// Make a Store with New on a rueidis client, or NewGoRedis on an existing
// go-redis v9 client, and hand it to ratewarden.New (or to stack).
// ParseURL and ClientFromURL read the connection URL forms.
//
// Every Check is one execution of one Lua script (on Redis 7 a function
// of a library the Store loads itself, FCALL; else EVALSHA, and EVAL when
// Redis answers NOSCRIPT: see WithFunctions), so a check is atomic: all limits of the key, the
// cost and the expiry are decided and written together. The script takes
// "now" from Redis TIME; the Store has no clock, so replicas whose clocks
// disagree still agree on every decision, RetryAfter and ResetAfter. A
// check that any limit rejects consumes nothing; Peek and cost 0 write
// nothing; every write sets the key's expiry. Redis and network errors
// wrap ratewarden.ErrStoreUnavailable (and the context's error when the
// caller's context ended). The Store relies on the ratewarden.Limiter for
// valid input and does not check it again.
//
// Checks that arrive while WithBatchLanes script calls (default 2) are in
// flight queue and go out together, up to WithBatchSize (default 64) per
// script call, each still atomic with its own result; a check that finds a
// free lane goes out at once, so batching adds no delay at low load.
// Cluster clients do not batch.
//
// The state of a key under a limit lives at
//
//	<prefix>{<tag>}<code><period>
//
// for example rw:{user:42}f1m for a fixed window of one minute (codes s,
// f, t, l for the four algorithms). The tag is the caller's key, or a hash
// of it when it is longer than MaxKeyLen, contains a brace or starts with
// '#', so all limits of one key share one Cluster slot (Slot computes it)
// and the tag cannot be broken. Store.Key returns the name. The windows
// and the token bucket keep one small integer and carry their instants in
// the key's expiry (Redis 7; 6.2 gets longer strings), so a key costs
// little more than a bare counter with a TTL. KeyFormat versions the layout
// and the states: replicas of versions with different formats use
// different keys, so their counts restart once on upgrade.
//
// Beyond checks, a Store takes reservations, settlements and concurrency
// limits, each one script execution on Redis' clock. A Request with
// MaxDelay on token buckets (Limiter.Wait) reserves capacity ahead of time
// in the check script itself: the bucket's TAT moves now, and
// Result.Delay says when the units may be used, so waiters on every
// replica are served in the order they reached Redis. Charge
// (ratewarden.Store.Charge) applies charges and refunds dated when their
// units were admitted (Limiter.Reserve's settlements, a canceled Wait giving its
// reservation back) and reports what each limit took. Acquire, Release
// and Extend (Limiter.Acquire) keep a key's permits in one sorted set at
//
//	<prefix>{<tag>}p
//
// (PermitKey), a member per holder scored by its expiry, so a replica that
// dies holding permits frees them at their expiry; the key expires with
// its latest permit.
//
// Lease mode, which answers checks of hot keys from capacity leased in
// batches, is package lease.
//
// docs/redis.md specifies the rest: batching under cancellation and
// errors, the key format and upgrades, the scripts' arguments and
// replies, each algorithm's state and expiry, and the permits.
package redisstore
