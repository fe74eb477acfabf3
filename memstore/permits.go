package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden"
)

// permitShards is how many locks the concurrency limits are spread over.
const permitShards = 16

// permits holds the concurrency limits (Acquire, Release, Extend): per
// key, its holders and the instant (µs) each one's permit expires. They
// live apart from the rate-limit states, in shards of their own, and count
// against WithMaxKeys separately.
type permits struct {
	shards [permitShards]permitShard
}

type permitShard struct {
	mu   sync.Mutex
	keys map[string]map[string]int64 // key → holder → expiry (µs)
	cap  int
}

func (p *permits) init(maxKeys int) {
	for i := range p.shards {
		p.shards[i].keys = make(map[string]map[string]int64)
		p.shards[i].cap = max(maxKeys/permitShards, 1)
	}
}

func (s *Store) permitShard(key string) *permitShard {
	return &s.permits.shards[maphash.String(s.seed, key)%permitShards]
}

// live drops the expired holders of hs and returns how many remain and
// the soonest expiry among them (0 when none).
func live(hs map[string]int64, now int64) (n int, soonest int64) {
	for h, exp := range hs {
		if exp <= now {
			delete(hs, h)
			continue
		}
		if soonest == 0 || exp < soonest {
			soonest = exp
		}
	}
	return len(hs), soonest
}

// permitCheck refuses what the store cannot hold, as Check does.
func (s *Store) permitCheck(key string) error {
	if len(key) > s.maxKey {
		return s.keyTooLong(len(key))
	}
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// Acquire implements ratewarden.Store: holder takes a permit of key
// for ttl when fewer than max unexpired permits are held. A key with no
// permits left is forgotten. When WithMaxKeys keys already hold permits in
// the key's shard (after dropping expired ones), a new key is refused with
// an error wrapping ratewarden.ErrStoreUnavailable: evicting held permits
// would admit more than max. ctx is not consulted.
func (s *Store) Acquire(_ context.Context, key, holder string, max int64, ttl time.Duration) (ratewarden.PermitResult, error) {
	if err := s.permitCheck(key); err != nil {
		return ratewarden.PermitResult{}, err
	}
	now := s.nowMicro()
	sh := s.permitShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	hs := sh.keys[key]
	n, soonest := live(hs, now)
	if _, held := hs[holder]; held || int64(n) >= max {
		return ratewarden.PermitResult{Held: int64(n), RetryAfter: time.Duration(soonest-now) * time.Microsecond}, nil
	}
	if hs == nil {
		if len(sh.keys) >= sh.cap {
			sh.sweep(now)
		}
		if len(sh.keys) >= sh.cap {
			return ratewarden.PermitResult{}, fmt.Errorf("memstore: acquire: %d keys hold permits, the bound of this shard (WithMaxKeys): %w", len(sh.keys), ratewarden.ErrStoreUnavailable)
		}
		hs = make(map[string]int64, 1)
		sh.keys[strings.Clone(key)] = hs
	}
	hs[strings.Clone(holder)] = now + ttl.Microseconds()
	return ratewarden.PermitResult{Acquired: true, Held: int64(n) + 1}, nil
}

// sweep forgets the keys whose permits have all expired. The caller holds
// sh.mu.
func (sh *permitShard) sweep(now int64) {
	for k, hs := range sh.keys {
		if n, _ := live(hs, now); n == 0 {
			delete(sh.keys, k)
		}
	}
}

// Release implements ratewarden.Store.
func (s *Store) Release(_ context.Context, key, holder string) (bool, error) {
	if err := s.permitCheck(key); err != nil {
		return false, err
	}
	now := s.nowMicro()
	sh := s.permitShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	hs := sh.keys[key]
	exp, ok := hs[holder]
	delete(hs, holder)
	if n, _ := live(hs, now); n == 0 && hs != nil {
		delete(sh.keys, key)
	}
	return ok && exp > now, nil
}

// Extend implements ratewarden.Store.
func (s *Store) Extend(_ context.Context, key, holder string, ttl time.Duration) (bool, error) {
	if err := s.permitCheck(key); err != nil {
		return false, err
	}
	now := s.nowMicro()
	sh := s.permitShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	hs := sh.keys[key]
	if exp, ok := hs[holder]; !ok || exp <= now {
		return false, nil
	}
	hs[holder] = now + ttl.Microseconds()
	return true, nil
}
