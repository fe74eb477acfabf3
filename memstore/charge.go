package memstore

import (
	"context"
	"fmt"
	"hash/maphash"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/algo"
)

// Charge implements ratewarden.Store: it applies every Spent (a charge,
// or with negative Units a refund, dated Ago before now on the store's
// clock) to key's state under each of limits, as ratewarden.Store.Charge
// specifies (internal/algo's Charge functions), under the key's one lock,
// and writes into applied (when not nil) the units each limit took. Bad
// input is an error naming the field, and changes nothing.
func (s *Store) Charge(_ context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	if err := ratewarden.ValidateCharge(key, limits, spent); err != nil {
		return fmt.Errorf("memstore: charge: %w", err)
	}
	if len(key) > s.maxKey {
		return s.keyTooLong(len(key))
	}
	if s.closed.Load() {
		return errClosed
	}
	now := s.nowMicro()
	dated := make([]algo.Charged, len(spent))
	for i, sp := range spent {
		dated[i] = algo.Charged{Units: sp.Units, At: now - sp.Ago.Microseconds()}
	}
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i, lim := range limits {
		sc := scope{lim.Algorithm, lim.Period}
		a := sh.charge(stateHash(h, sc), key, sc, lim, now, dated)
		if applied != nil {
			applied[i] = a
		}
	}
	return nil
}

// charge applies dated to key's state under lim (scope sc, stored at hash)
// and returns the units that took effect. The caller holds sh.mu.
func (sh *shard) charge(hash uint64, key string, sc scope, lim ratewarden.Limit, now int64, dated []algo.Charged) int64 {
	e := sh.find(hash, key, sc)
	var cur state
	if e != nil && e.expireAt > now {
		cur = e.state
	} else if e != nil {
		cur.log = e.log[:0]
	}
	p := algo.FromLimit(lim)
	var applied, expireAt int64
	var changed bool
	switch lim.Algorithm {
	case ratewarden.FixedWindow, ratewarden.SlidingWindow:
		var w algo.Window
		w, applied, changed, expireAt = algo.ChargeWindow(cur.window(), now, p, lim.Algorithm == ratewarden.SlidingWindow, dated)
		cur.setWindow(w)
	case ratewarden.TokenBucket:
		var b algo.Bucket
		b, applied, changed, expireAt = algo.ChargeBucket(cur.bucket(), now, p, dated)
		cur.setBucket(b)
	default:
		cur.log, applied, changed, expireAt = algo.ChargeLog(cur.log, now, p, dated)
	}
	switch {
	case !changed:
	case expireAt <= now:
		if e != nil {
			sh.remove(hash, e)
		}
	default:
		if e == nil {
			e = sh.insert(hash, key, sc, now)
		}
		e.state, e.expireAt = cur, expireAt
	}
	return applied
}
