// Package config loads and validates the service's YAML configuration: named
// policies for the HTTP API, and Envoy rate limit domains (the format of
// envoyproxy/ratelimit: its fields, all seven units and its YAML 1.1
// booleans; docs/service.md lists what differs) for the gRPC rate limit
// service.
//
// A configuration is one or more files (or directories of *.yaml / *.yml
// files), each holding one or more YAML documents. A document with a
// top-level "domain" key is an Envoy domain; any other document holds native
// settings:
//
//	failure_policy: local_fallback   # default for every limit below
//	policies:
//	  api: 100/1m                    # ParseLimit's string form
//	  login:
//	    limit: 5/1m burst 10 token_bucket
//	    failure_policy: fail_closed
//	  search:                        # or the fields one by one
//	    algorithm: token_bucket
//	    rate: 10
//	    period: 1s
//	    burst: 20
//	    shadow_mode: true
//	  jobs:                          # a concurrency limit (POST /v1/acquire)
//	    max_in_flight: 10
//	    ttl: 30s
//
// Envoy domains accept, inside rate_limit, the additive extensions algorithm
// (default fixed_window, as envoyproxy/ratelimit counts), burst and
// failure_policy, and failure_policy at the top of the document.
//
// Validation reports every problem it finds, each with file and line, and
// Load returns no Config unless there are none: a running service keeps its
// old configuration when a new one is invalid.
package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
)

// A failure policy (failure_policy in the config) says what a limit does
// when the shared store cannot decide: one of fallback's policies, the
// type the stores that apply it take. The zero fallback.Policy means
// "inherit": from the domain, then the file's top-level failure_policy,
// then the service default.

// Config is a validated configuration. It is immutable once loaded: the
// service swaps whole Configs on reload.
type Config struct {
	// Failure is the top-level failure_policy; 0 when not set.
	Failure fallback.Policy
	// Policies are the named policies of the HTTP API, by name.
	Policies map[string]*Policy
	// Domains are the Envoy domains, by name.
	Domains map[string]*Domain
	// Inline is the inline_limits setting; nil when no file sets it.
	Inline *InlineLimits
	// Files are the files the configuration was read from, in order.
	Files []string
	// Warnings are what was accepted but ignored: a key of
	// envoyproxy/ratelimit's format in a place where it means nothing
	// (that service ignores it too).
	Warnings []Problem
}

// Policy is a named limit for the HTTP API: a rate limit (POST /v1/check,
// /v1/reserve), or a concurrency limit (POST /v1/acquire) when
// Concurrency is set.
type Policy struct {
	Name string
	// Limit is a rate policy's limit; zero for a concurrency policy.
	Limit ratewarden.Limit
	// Concurrency is a concurrency policy's limit; nil for a rate policy.
	Concurrency *Concurrency
	Failure     fallback.Policy // 0: inherit
	// Shadow reports over-limit decisions (in the body and metrics) but
	// lets the request pass. Rate policies only.
	Shadow bool
	// Source is "file:line" of the definition.
	Source string
}

// Concurrency is a concurrency policy's limit (max_in_flight and ttl in
// the config): at most MaxInFlight permits of one key held at once, on
// every replica together, each expiring TTL after it was acquired or last
// extended, so that a caller that dies holding one frees it after TTL.
type Concurrency struct {
	// MaxInFlight is 1 to ratewarden.MaxPermits.
	MaxInFlight int64
	// TTL is ratewarden.MinPeriod to ratewarden.MaxPeriod, whole
	// milliseconds; it also bounds what a caller may extend a permit by.
	TTL time.Duration
}

// String is the concurrency limit as the config dump shows it, its ttl in
// the config's grammar: "max_in_flight 10, ttl 30s", "..., ttl 1h".
func (c *Concurrency) String() string {
	// A Limit's String writes a period as the config reads it.
	ttl := strings.TrimPrefix(ratewarden.Limit{Rate: 1, Period: c.TTL, Algorithm: ratewarden.DefaultAlgorithm}.String(), "1/")
	return fmt.Sprintf("max_in_flight %d, ttl %s", c.MaxInFlight, ttl)
}

// Domain is one Envoy rate limit domain: a tree of descriptors.
type Domain struct {
	Name        string
	Failure     fallback.Policy // 0: inherit
	Descriptors []*Descriptor
	Source      string
}

// Descriptor is one node of a domain's tree.
type Descriptor struct {
	Key string
	// Value is the value to match; empty matches any value (each distinct
	// value counts separately). With Prefix, Value is a prefix (the
	// config's trailing "*" removed).
	Value  string
	Prefix bool
	// RateLimit applies when a request's entries end at this node; nil
	// means no limit.
	RateLimit *RateLimit
	// Shadow: the limit is counted and reported but never makes a request
	// OVER_LIMIT; the descriptor's status says OK.
	Shadow bool
	// QuotaMode: like Shadow, and an over-limit status also carries no
	// duration_until_reset (envoyproxy/ratelimit's quota_mode).
	QuotaMode bool
	// DetailedMetric and ValueToMetric are accepted for compatibility:
	// envoyproxy/ratelimit puts request values into metric names with
	// them; ratewarden's metric labels never carry request values.
	DetailedMetric bool
	ValueToMetric  bool
	// ShareThreshold (a wildcard value only): every value matching the
	// wildcard counts on one shared counter instead of one per value.
	ShareThreshold bool
	Descriptors    []*Descriptor
	// Path names the node for metrics and logs: the keys (and configured
	// values) from the root, like "remote_address" or
	// "generic_key=foo.header". It holds config text only, never request
	// values.
	Path   string
	Source string
}

// RateLimit is a descriptor's rate_limit.
type RateLimit struct {
	Name            string
	Unit            string // a key of Units (second ... year); empty when Unlimited
	RequestsPerUnit uint32
	Unlimited       bool
	Replaces        []string
	Failure         fallback.Policy // 0: inherit
	// Limit is the limit counted in the store; meaningful only when
	// Counted reports true.
	Limit ratewarden.Limit
}

// Counted reports whether the limit is counted in the store: false for
// unlimited and for requests_per_unit 0 (always over the limit).
func (r *RateLimit) Counted() bool { return !r.Unlimited && r.RequestsPerUnit > 0 }

// Entry is one key/value pair of a request descriptor.
type Entry struct{ Key, Value string }

// Match walks the tree with the entries of one request descriptor and
// returns the node they end at, or nil when they do not all match. At each
// level a node with the key and the exact value wins; then the first
// wildcard (a value ending in "*") in config order whose prefix the value
// has; then the node with the key alone. That is envoyproxy/ratelimit's
// order. Match allocates nothing: the service calls it on every request.
func (d *Domain) Match(entries []Entry) *Descriptor {
	level := d.Descriptors
	var node *Descriptor
	for _, e := range entries {
		if node = matchLevel(level, e); node == nil {
			return nil
		}
		level = node.Descriptors
	}
	return node
}

// MatchPath is Match returning the node each entry matched, from the
// root: nil when the entries do not all match.
func (d *Domain) MatchPath(entries []Entry) []*Descriptor {
	level := d.Descriptors
	path := make([]*Descriptor, 0, len(entries))
	for _, e := range entries {
		node := matchLevel(level, e)
		if node == nil {
			return nil
		}
		path = append(path, node)
		level = node.Descriptors
	}
	return path
}

func matchLevel(level []*Descriptor, e Entry) *Descriptor {
	var prefix, any *Descriptor
	for _, n := range level {
		if n.Key != e.Key {
			continue
		}
		switch {
		case n.Prefix:
			if prefix == nil && strings.HasPrefix(e.Value, n.Value) {
				prefix = n
			}
		case n.Value == "":
			any = n
		case n.Value == e.Value:
			return n
		}
	}
	if prefix != nil {
		return prefix
	}
	return any
}

// Problem is one thing wrong with a configuration.
type Problem struct {
	File string
	Line int // 0 when the problem is not tied to a line
	Msg  string
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
	}
	return fmt.Sprintf("%s: %s", p.File, p.Msg)
}

// Error lists every problem found in a configuration. It matches
// ratewarden.ErrInvalidConfig with errors.Is.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config: %d problem", len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteByte('s')
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Is makes errors.Is(err, ratewarden.ErrInvalidConfig) true.
func (e *Error) Is(target error) bool { return target == ratewarden.ErrInvalidConfig }

// Problems returns the problems in err when it is (or wraps) an *Error.
func Problems(err error) []Problem {
	var e *Error
	if errors.As(err, &e) {
		return e.Problems
	}
	return nil
}
