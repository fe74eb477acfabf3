package memstore

import (
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/algo"
)

// allBuckets reports whether every limit is a TokenBucket: only then can a
// check reserve capacity ahead of time (ratewarden.Request.MaxDelay).
func allBuckets(limits []ratewarden.Limit) bool {
	for _, l := range limits {
		if l.Algorithm != ratewarden.TokenBucket {
			return false
		}
	}
	return true
}

// reserve decides req, a reservation on token buckets only, into res: the
// cost is admitted now when every bucket takes it now; else, when the
// largest wait any bucket needs is within req.MaxDelay, admitted for use
// that long from now, every bucket consuming as if it arrived then
// (algo.TokenBucketReserve); else denied with each bucket's own verdict.
// The caller holds sh.mu; h is the hash of req.Key.
func (sh *shard) reserve(req *ratewarden.Request, res []ratewarden.Result, h uint64, now int64) {
	var buf [8]*entry
	found := buf[:0]
	var delay int64
	for i, lim := range req.Limits {
		sc := scope{lim.Algorithm, lim.Period}
		hash := stateHash(h, sc)
		var o algo.Outcome
		found = append(found, sh.decide(&o, sh.find(hash, req.Key, sc), hash, req.Key, lim, now, req.Cost, false))
		storeResult(&res[i], lim, &o)
		if !o.Allowed {
			delay = max(delay, o.RetryAfter)
		}
	}
	consume := req.Cost > 0 && !req.Peek
	switch {
	case delay == 0 && !consume:
	case delay == 0:
		for i, lim := range req.Limits {
			var o algo.Outcome
			sh.decide(&o, found[i], stateHash(h, scope{lim.Algorithm, lim.Period}), req.Key, lim, now, req.Cost, true)
			storeResult(&res[i], lim, &o)
		}
	case delay <= req.MaxDelay.Microseconds():
		for i, lim := range req.Limits {
			sh.reserveOne(&res[i], found[i], stateHash(h, scope{lim.Algorithm, lim.Period}), req.Key, lim, now, req.Cost, delay, consume)
		}
	}
}

// reserveOne reserves cost units of the bucket lim for now + delay into r,
// storing the new state when consume is set; e is key's live state under
// lim as decide left it (nil for none: decide drops an expired one),
// stored at hash. The caller holds sh.mu.
func (sh *shard) reserveOne(r *ratewarden.Result, e *entry, hash uint64, key string, lim ratewarden.Limit, now, cost, delay int64, consume bool) {
	var cur state
	if e != nil {
		cur = e.state
	}
	b, o := algo.TokenBucketReserve(cur.bucket(), now, algo.FromLimit(lim), cost, delay, consume)
	if o.Wrote {
		if e == nil {
			e = sh.insert(hash, key, scope{lim.Algorithm, lim.Period}, now)
		}
		e.setBucket(b)
		e.expireAt = o.ExpireAt
	}
	*r = ratewarden.Result{
		Allowed:    true,
		Limit:      lim,
		Remaining:  o.Remaining,
		ResetAfter: time.Duration(o.ResetAfter) * time.Microsecond,
		Delay:      time.Duration(o.Delay) * time.Microsecond,
		Source:     ratewarden.SourceStore,
	}
}
