package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"

	"github.com/ratewarden/ratewarden"
)

// MaxKeyLen is the longest caller key kept as is inside the hash tag;
// longer keys are hashed.
const MaxKeyLen = 256

// Key returns the Redis key holding the state of key under limit:
//
//	<prefix>{<tag>}:<algorithm>:<period>
//
// where tag is key itself, or "#" and the hex of the first 16 bytes of
// key's SHA-256 when key is longer than MaxKeyLen, contains '{' or '}',
// starts with '#' (so a hashed tag never equals a caller's key) or is empty
// (which the Limiter rejects anyway).
func (s *Store) Key(key string, limit ratewarden.Limit) string {
	var c call
	return s.key(&c, key, s.enc.get(limit))
}

// key builds the key in c.kb and allocates only the result.
func (s *Store) key(c *call, key string, e *limitEnc) string {
	b := append(c.kb[:0], s.prefix...)
	b = append(b, '{')
	b = appendTag(b, key)
	b = append(b, e.suffix...)
	c.kb = b
	return string(b)
}

// appendTag appends the hash tag content for key.
func appendTag(b []byte, key string) []byte {
	if key != "" && len(key) <= MaxKeyLen && key[0] != '#' && !strings.ContainsAny(key, "{}") {
		return append(b, key...)
	}
	sum := sha256.Sum256([]byte(key))
	b = append(b, '#')
	return hex.AppendEncode(b, sum[:16])
}

// limitEnc is what a Limit contributes to a script call, formatted once.
type limitEnc struct {
	suffix string    // "}:" + Scope()
	args   [4]string // algorithm code, rate, period µs, capacity
}

// encCache keeps the encodings of recently used limits, so a check formats
// no numbers. It is bounded: when full it starts over.
type encCache struct {
	mu sync.RWMutex
	m  map[ratewarden.Limit]*limitEnc
}

const encCacheSize = 1024

func (c *encCache) get(l ratewarden.Limit) *limitEnc {
	c.mu.RLock()
	e := c.m[l]
	c.mu.RUnlock()
	if e != nil {
		return e
	}
	e = &limitEnc{
		suffix: "}:" + l.Scope(),
		args: [4]string{
			strconv.Itoa(int(l.Algorithm)),
			strconv.FormatInt(l.Rate, 10),
			strconv.FormatInt(l.Period.Microseconds(), 10),
			strconv.FormatInt(l.Capacity(), 10),
		},
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= encCacheSize {
		c.m = make(map[ratewarden.Limit]*limitEnc)
	}
	c.m[l] = e
	c.mu.Unlock()
	return e
}
