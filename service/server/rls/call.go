package rls

import (
	"hash/maphash"
	"net/url"
	"strings"
	"sync"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server/decide"
)

// rlsCall is the working state of one ShouldRateLimit call: buffers that
// grow to the largest request seen and are reused through a pool, so that
// a request allocates little beyond its store keys and its answer.
type rlsCall struct {
	entries  []config.Entry // every descriptor's entries, one after another
	ends     []int          // ends[i]: the end of descriptor i's entries
	evals    []evalDesc
	replaced []string // names of the limits replaced by limits that matched
	slots    []slot
	units    []unit
	limits   []ratewarden.Limit // every unit's limits, one after another
	checks   []ratewarden.KeyCheck
	sub      []ratewarden.KeyCheck
	idx      []int
	idx2     []int
	key      []byte
	results  []ratewarden.Result
	policies []httplimit.Policy
	ids      []byte    // the node ids of policies, a rendererCache key
	node0    *nodePlan // the node of policies[0]
	fields   []httplimit.Field
}

var rlsCalls = sync.Pool{New: func() any { return new(rlsCall) }}

func newRLSCall() *rlsCall { return rlsCalls.Get().(*rlsCall) }

// free empties c, dropping what it refers to, and pools it.
func (c *rlsCall) free() {
	clear(c.entries)
	clear(c.evals)
	clear(c.replaced)
	clear(c.slots)
	clear(c.units)
	clear(c.checks)
	clear(c.sub)
	clear(c.results)
	clear(c.policies)
	clear(c.fields)
	c.entries, c.ends, c.evals, c.replaced, c.slots, c.units = c.entries[:0], c.ends[:0], c.evals[:0], c.replaced[:0], c.slots[:0], c.units[:0]
	c.limits, c.checks, c.sub, c.idx, c.idx2, c.key = c.limits[:0], c.checks[:0], c.sub[:0], c.idx[:0], c.idx2[:0], c.key[:0]
	c.results, c.policies, c.ids, c.fields, c.node0 = c.results[:0], c.policies[:0], c.ids[:0], c.fields[:0], nil
	rlsCalls.Put(c)
}

// newEvals returns n zero evalDescs.
func (c *rlsCall) newEvals(n int) []evalDesc {
	if cap(c.evals) < n {
		c.evals = make([]evalDesc, n)
	}
	c.evals = c.evals[:n]
	clear(c.evals)
	return c.evals
}

// descEntries are the entries of descriptor i.
func (c *rlsCall) descEntries(i int) []config.Entry {
	start := 0
	if i > 0 {
		start = c.ends[i-1]
	}
	return c.entries[start:c.ends[i]]
}

// appendEnvoyKey appends the store key of a descriptor to b: prefix (the
// escaped domain) and every entry, each escaped so that no two
// descriptors share a key by accident. Each distinct value counts
// separately, as in envoyproxy/ratelimit, except an entry i matched by a
// share_threshold wildcard: its value is that wildcard, shared[i], after
// a bare '*', which no escaped value holds, so every value matching the
// wildcard counts on one key.
func appendEnvoyKey(b []byte, prefix string, entries []config.Entry, shared []string) []byte {
	b = append(b, prefix...)
	for i, e := range entries {
		b = append(b, '/')
		b = append(b, url.QueryEscape(e.Key)...) // no allocation unless something needs escaping
		b = append(b, '=')
		v := e.Value
		if i < len(shared) && shared[i] != "" {
			b = append(b, '*')
			v = shared[i]
		}
		b = append(b, url.QueryEscape(v)...)
	}
	return b
}

var keySeed = maphash.MakeSeed()

// keyHash64 hashes a store key, so that grouping compares numbers before
// strings.
func keyHash64(key string) uint64 { return maphash.String(keySeed, key) }

// slot is a limit on a key that one or more descriptors count on: the
// same limit (rate, burst, algorithm and period) on the same key twice
// counts its costs together.
type slot struct {
	key    string
	khash  uint64
	fp     fallback.Policy
	shadow bool
	limit  ratewarden.Limit
	cost   int64 // the descriptors' costs, summed
	left   int64 // while grouping: cost less the descriptors seen so far
	unit   int   // index of its unit
	pos    int   // index of its limit in the unit
}

// group turns the counted descriptors into units (store calls). The limits
// of one key with the same cost, failure policy and shadow mode form one
// atomic unit; the same limit on the same key twice counts its costs
// together. Descriptors with different limits never merge, so none loses
// its own rate. A request has at most MaxDescriptors descriptors, so the
// searches are linear, comparing key hashes first.
func (c *rlsCall) group() {
	c.mergeSlots()
	if len(c.slots) == 0 {
		return
	}
	c.makeUnits()
	for i := range c.evals {
		e := &c.evals[i]
		if e.kind != kindCounted {
			continue
		}
		s := &c.slots[e.slot]
		s.left -= e.cost
		e.unit, e.idx, e.later = &c.units[s.unit], s.pos, max(s.left, 0)
	}
}

// mergeSlots gives each counted descriptor its slot, summing the costs of
// the descriptors of one slot.
func (c *rlsCall) mergeSlots() {
	for i := range c.evals {
		e := &c.evals[i]
		if e.kind != kindCounted {
			continue
		}
		e.slot = -1
		for j := range c.slots {
			s := &c.slots[j]
			if s.khash == e.khash && s.fp == e.fp && s.shadow == e.shadow && s.limit == e.limit && s.key == e.key {
				e.slot = j
				break
			}
		}
		if e.slot < 0 {
			e.slot = len(c.slots)
			c.slots = append(c.slots, slot{key: e.key, khash: e.khash, fp: e.fp, shadow: e.shadow, limit: e.limit})
		}
		s := &c.slots[e.slot]
		s.cost = addSat(s.cost, e.cost)
	}
}

// makeUnits makes the units of the slots, in the order of their first
// slot, with each unit's limits side by side in one array.
func (c *rlsCall) makeUnits() {
	counts := c.idx[:0] // limits per unit
	for j := range c.slots {
		s := &c.slots[j]
		s.left, s.unit = s.cost, -1
		for k := range c.units {
			u := &c.units[k]
			if u.khash == s.khash && u.fp == s.fp && u.shadow == s.shadow && u.cost == s.cost && u.key == s.key {
				s.unit = k
				break
			}
		}
		if s.unit < 0 {
			s.unit = len(c.units)
			c.units = append(c.units, unit{key: s.key, khash: s.khash, cost: s.cost, fp: s.fp, shadow: s.shadow})
			counts = append(counts, 0)
		}
		s.pos = counts[s.unit]
		counts[s.unit]++
	}
	if cap(c.limits) < len(c.slots) {
		c.limits = make([]ratewarden.Limit, len(c.slots))
	}
	c.limits = c.limits[:len(c.slots)]
	start := 0
	for k := range c.units {
		c.units[k].limits = c.limits[start : start+counts[k] : start+counts[k]]
		start += counts[k]
	}
	c.idx = counts[:0]
	for j := range c.slots {
		s := &c.slots[j]
		u := &c.units[s.unit]
		u.limits[s.pos] = s.limit
		if s.cost > s.limit.Capacity() {
			u.impossible = true
		}
	}
}

// draftHeaders are ratewarden's headers: RateLimit-Policy and RateLimit
// with one item per enforced limit (requests_per_unit 0 included),
// X-RateLimit-* for the binding one, Retry-After when over. Shadow and
// quota limits are left out unless no enforced limit applies. The
// renderer of the limits is their node's, or kept in the domain's
// rendererCache; made for the request only when an override is among
// them.
func (c *rlsCall) draftHeaders(dp *domainPlan, over bool, now time.Time) []*corepb.HeaderValue {
	for _, shadow := range []bool{false, true} {
		c.collect(shadow, now)
		if len(c.results) > 0 {
			if shadow {
				for i := range c.results {
					c.results[i].Allowed = true // a shadow limit never rejects
					c.results[i].RetryAfter = 0
				}
			}
			break
		}
	}
	var r *httplimit.Renderer
	switch {
	case len(c.results) == 0:
		return nil
	case c.ids == nil:
		r = httplimit.NewRenderer(decide.DraftSet, c.policies...) // an override is among them
	case len(c.results) == 1:
		r = c.node0.renderer
	default:
		r = dp.renderers.get(c.ids, c.policies)
	}
	c.fields = r.Append(c.fields[:0], ratewarden.Decision{Allowed: !over, Results: c.results}, over)
	return headerValues(c.fields)
}

// collect gathers the results and header policies of the limits that are
// (shadow) or are not shadow, each limit once, and their node ids; ids is
// nil when one is an override.
func (c *rlsCall) collect(shadow bool, now time.Time) {
	c.results, c.policies, c.ids, c.node0 = c.results[:0], c.policies[:0], c.ids[:0], nil
	if c.ids == nil {
		c.ids = make([]byte, 0, 64)
	}
	noIDs := false
	for i := range c.evals {
		e := &c.evals[i]
		if e.shadow != shadow {
			continue
		}
		var res ratewarden.Result
		switch e.kind {
		case kindCounted:
			if c.seen(e) {
				continue
			}
			res = e.unit.res[e.idx]
		case kindZero:
			reset := windowReset(e.period, now)
			res = ratewarden.Result{Limit: zeroLimit(e.period), RetryAfter: reset, ResetAfter: reset}
		default:
			continue
		}
		c.results = append(c.results, res)
		c.policies = append(c.policies, httplimit.Policy{Name: e.label, Limit: res.Limit})
		if e.node == nil {
			noIDs = true
		} else {
			if c.node0 == nil {
				c.node0 = e.node
			}
			id := e.node.id
			c.ids = append(c.ids, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
		}
	}
	if noIDs {
		c.ids = nil
	}
}

// seen reports whether a descriptor before e counted on the same limit
// and key: its result is rendered once.
func (c *rlsCall) seen(e *evalDesc) bool {
	for i := range c.evals {
		p := &c.evals[i]
		if p == e {
			return false
		}
		if p.kind == kindCounted && p.shadow == e.shadow && p.unit == e.unit && p.idx == e.idx {
			return true
		}
	}
	return false
}

// headerValues are fields as Envoy's header values, names in lower case as
// HTTP/2 (and Envoy) want them: one allocation for the values, one for
// the pointers.
func headerValues(fields []httplimit.Field) []*corepb.HeaderValue {
	if len(fields) == 0 {
		return nil
	}
	hvs := make([]corepb.HeaderValue, len(fields))
	out := make([]*corepb.HeaderValue, len(fields))
	for i, f := range fields {
		hvs[i].Key, hvs[i].Value = lowerName(f.Name), f.Value
		out[i] = &hvs[i]
	}
	return out
}

// lowerName is a header name in lower case; the names a Renderer writes
// are constants.
func lowerName(name string) string {
	switch name {
	case "Ratelimit-Policy":
		return "ratelimit-policy"
	case "Ratelimit":
		return "ratelimit"
	case "X-Ratelimit-Limit":
		return "x-ratelimit-limit"
	case "X-Ratelimit-Remaining":
		return "x-ratelimit-remaining"
	case "X-Ratelimit-Reset":
		return "x-ratelimit-reset"
	case "Retry-After":
		return "retry-after"
	}
	return strings.ToLower(name)
}
