package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
)

// MaxFileSize bounds one config file, so a wrong path cannot make the
// service read a huge file into memory.
const MaxFileSize = 16 << 20

// Files expands paths into the config files they name: a file as is, a
// directory as its *.yaml and *.yml files (not recursive), sorted by name.
func Files(paths ...string) ([]string, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("config: no config path given: %w", ratewarden.ErrInvalidConfig)
	}
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("config: %v: %w", err, ratewarden.ErrInvalidConfig)
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("config: %v: %w", err, ratewarden.ErrInvalidConfig)
		}
		var in []string
		for _, e := range ents {
			ext := filepath.Ext(e.Name())
			if !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
				in = append(in, filepath.Join(p, e.Name()))
			}
		}
		slices.Sort(in)
		files = append(files, in...)
	}
	return files, nil
}

// Fingerprint hashes the names and contents of the files under paths. The
// service polls it to notice edits (contents, not mtimes, so an edit within
// the same second, or a file replaced by rename, is never missed).
func Fingerprint(paths ...string) (string, error) {
	files, err := Files(paths...)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range files {
		b, err := readFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("config: %v: %w", err, ratewarden.ErrInvalidConfig)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: %s: %v: %w", name, err, ratewarden.ErrInvalidConfig)
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("config: %s: larger than %d bytes: %w", name, MaxFileSize, ratewarden.ErrInvalidConfig)
	}
	return b, nil
}

// Load reads and validates the configuration under paths (files or
// directories). On any problem it returns a nil Config and an *Error listing
// all of them. It is Loader{}.Load.
func Load(paths ...string) (*Config, error) { return Loader{}.Load(paths...) }

// Parse validates one file's contents; name is used in problems. It is
// Loader{}.Parse.
func Parse(name string, data []byte) (*Config, error) { return Loader{}.Parse(name, data) }

// Loader loads configurations with options. The zero Loader is what Load
// and Parse use.
type Loader struct {
	// MergeDomains merges Envoy documents that name the same domain into
	// one domain (their top-level descriptors appended in load order), as
	// envoyproxy/ratelimit does with MERGE_DOMAIN_CONFIG=true, instead of
	// refusing the second one. A descriptor defined in two of them is
	// still a duplicate.
	MergeDomains bool
}

// Load reads and validates the configuration under paths (files or
// directories). On any problem it returns a nil Config and an *Error
// listing all of them.
func (ld Loader) Load(paths ...string) (*Config, error) {
	files, err := Files(paths...)
	if err != nil {
		return nil, err
	}
	l := newLoader()
	l.merge = ld.MergeDomains
	for _, f := range files {
		b, err := readFile(f)
		if err != nil {
			l.problems = append(l.problems, Problem{File: f, Msg: err.Error()})
			continue
		}
		l.parse(f, b)
	}
	return l.finish(paths, files)
}

// Parse validates one file's contents; name is used in problems.
func (ld Loader) Parse(name string, data []byte) (*Config, error) {
	l := newLoader()
	l.merge = ld.MergeDomains
	l.parse(name, data)
	return l.finish([]string{name}, []string{name})
}

type loader struct {
	cfg         *Config
	problems    []Problem
	failureFrom string // where the top-level failure_policy was set
	merge       bool   // Loader.MergeDomains
}

func newLoader() *loader {
	return &loader{cfg: &Config{Policies: map[string]*Policy{}, Domains: map[string]*Domain{}}}
}

// finish returns the configuration read from files (under paths), or every
// problem found. A configuration with no policies and no domains is a
// problem too: an empty or truncated file (what `cat > f` or a non-atomic
// save leaves for a moment) or a directory without config files would
// otherwise lift every limit, a block list's included.
func (l *loader) finish(paths, files []string) (*Config, error) {
	if len(l.problems) == 0 && len(l.cfg.Policies) == 0 && len(l.cfg.Domains) == 0 {
		msg := "no policies or domains: an empty configuration is refused (it would lift every limit)"
		if len(files) == 0 {
			msg = "no policies or domains: no *.yaml or *.yml files"
		}
		l.problems = append(l.problems, Problem{File: strings.Join(paths, ", "), Msg: msg})
	}
	if len(l.problems) > 0 {
		return nil, &Error{Problems: l.problems}
	}
	l.cfg.Files = files
	return l.cfg, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

func (l *loader) parse(file string, data []byte) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			msg := err.Error()
			line := 0
			if m := yamlLine.FindStringSubmatch(msg); m != nil {
				line, _ = strconv.Atoi(m[1])
				msg = msg[len(m[0]):]
			} else {
				msg = strings.TrimPrefix(msg, "yaml: ")
			}
			l.problems = append(l.problems, Problem{File: file, Line: line, Msg: "invalid YAML: " + msg})
			return // the decoder cannot resynchronise after a syntax error
		}
		if len(doc.Content) == 0 {
			continue // an empty document (only comments)
		}
		p := &parser{l: l, file: file}
		p.document(doc.Content[0])
	}
}

// parser walks one document's nodes.
type parser struct {
	l     *loader
	file  string
	envoy bool // an Envoy domain document
}

// peerKeys are the keys envoyproxy/ratelimit's loader knows. It checks
// them wherever they appear and ignores one in the wrong place, so in an
// Envoy document such a key is ignored here too, with a warning, where
// any other unknown key is a problem.
var peerKeys = []string{"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric", "share_threshold"}

func (p *parser) warnf(n *yaml.Node, format string, args ...any) {
	p.l.cfg.Warnings = append(p.l.cfg.Warnings, Problem{File: p.file, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.l.problems = append(p.l.problems, Problem{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) where(n *yaml.Node) string { return p.file + ":" + strconv.Itoa(n.Line) }

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// field is one key/value pair of a mapping.
type field struct {
	name     string
	key, val *yaml.Node
}

// mapping returns the pairs of n, reporting (and dropping) keys outside
// allowed, duplicated keys and a node that is not a mapping.
func (p *parser) mapping(n *yaml.Node, what string, allowed ...string) ([]field, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.errf(n, "%s must be a mapping, got %s", what, kindName(n))
		return nil, false
	}
	var out []field
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.errf(k, "%s: keys must be strings", what)
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			if !p.envoy {
				p.errf(k, "%s: key %q given twice (first at line %d)", what, k.Value, prev)
				continue
			}
			// envoyproxy/ratelimit's YAML parser keeps the last one.
			p.warnf(k, "%s: key %q given twice (first at line %d); the last one counts, as in envoyproxy/ratelimit", what, k.Value, prev)
			out = slices.DeleteFunc(out, func(f field) bool { return f.name == k.Value })
		}
		seen[k.Value] = k.Line
		if p.envoy && v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue // envoyproxy/ratelimit reads "key:" with nothing as the zero value: as if not given
		}
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			if p.envoy && slices.Contains(peerKeys, k.Value) {
				p.warnf(k, "%s: %q does not belong here and is ignored (as envoyproxy/ratelimit ignores it); want %s", what, k.Value, strings.Join(allowed, ", "))
			} else {
				p.errf(k, "%s: unknown key %q (want %s)", what, k.Value, strings.Join(allowed, ", "))
			}
			continue
		}
		out = append(out, field{name: k.Value, key: k, val: v})
	}
	return out, true
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

func (p *parser) str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errf(n, "%s must be a string, got %s", what, kindName(n))
		return "", false
	}
	if p.envoy && n.Tag == "!!float" && n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 {
		// envoyproxy/ratelimit refuses a fractional number anywhere.
		p.errf(n, "%s must be a string, got the number %s (quote it)", what, n.Value)
		return "", false
	}
	return n.Value, true
}

func (p *parser) boolean(n *yaml.Node, what string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	p.errf(n, "%s must be true or false, got %s", what, kindName(n))
	return false, false
}

// integer parses a whole number in [lo, hi].
func (p *parser) integer(n *yaml.Node, what string, lo, hi int64) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		p.errf(n, "%s must be a whole number, got %s", what, kindName(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil {
		p.errf(n, "%s: %q is out of range", what, n.Value)
		return 0, false
	}
	if v < lo || v > hi {
		if v < 0 && lo >= 0 {
			p.errf(n, "%s must not be negative, got %d", what, v)
		} else {
			p.errf(n, "%s must be between %d and %d, got %d", what, lo, hi, v)
		}
		return 0, false
	}
	return v, true
}

func (p *parser) failure(n *yaml.Node, what string) (fallback.Policy, bool) {
	s, ok := p.str(n, what)
	if !ok {
		return 0, false
	}
	f, err := fallback.ParsePolicy(s)
	if err != nil {
		p.errf(n, "%s: unknown failure policy %q (want fail_open, fail_closed or local_fallback)", what, s)
		return 0, false
	}
	return f, true
}

func (p *parser) document(n *yaml.Node) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.errf(n, "a config document must be a mapping (with \"policies\", or an Envoy \"domain\"), got %s", kindName(n))
		return
	}
	descs := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch n.Content[i].Value {
		case "domain":
			p.envoy = true
			p.domain(n)
			return
		case "descriptors":
			descs = true
		}
	}
	if descs {
		p.errf(n, "domain is missing: an Envoy document with descriptors needs a domain")
		return
	}
	p.native(n)
}

// limitUnset tells a Limit field that was not given apart from zero.
const limitUnset = -1

func (p *parser) native(n *yaml.Node) {
	fields, _ := p.mapping(n, "top level", "policies", "failure_policy", "inline_limits")
	for _, f := range fields {
		switch f.name {
		case "failure_policy":
			fp, ok := p.failure(f.val, "failure_policy")
			if !ok {
				continue
			}
			if p.l.failureFrom != "" && p.l.cfg.Failure != fp {
				p.errf(f.key, "failure_policy %s conflicts with %s set at %s", fp, p.l.cfg.Failure, p.l.failureFrom)
				continue
			}
			p.l.cfg.Failure, p.l.failureFrom = fp, p.where(f.key)
		case "inline_limits":
			p.inlineLimits(f)
		case "policies":
			pols, _ := p.mapping(f.val, "policies")
			for _, pf := range pols {
				p.policy(pf)
			}
		}
	}
}

// policyFields holds what a policy mapping gave, before it becomes a Limit
// (or a Concurrency).
type policyFields struct {
	limStr      *field
	alg         ratewarden.Algorithm
	algSet      bool
	rate, burst int64
	period      string
	maxInFlight int64
	ttl         *field
	shadow      *field
}

// concurrent reports whether the mapping gave a concurrency limit's
// fields.
func (pf *policyFields) concurrent() bool { return pf.maxInFlight != limitUnset || pf.ttl != nil }

// policyMapping reads a policy given as a mapping (limit, or algorithm,
// rate, period and burst, plus failure_policy and shadow_mode) into pol.
func (p *parser) policyMapping(f field, what string, pol *Policy) bool {
	fields, isMap := p.mapping(f.val, what, "limit", "algorithm", "rate", "period", "burst", "max_in_flight", "ttl", "failure_policy", "shadow_mode")
	if !isMap {
		return false
	}
	pf := policyFields{rate: limitUnset, burst: limitUnset, maxInFlight: limitUnset}
	ok := true
	for _, fld := range fields {
		ok = p.policyField(fld, what, pol, &pf) && ok
	}
	given := pf.algSet || pf.rate != limitUnset || pf.burst != limitUnset || pf.period != ""
	if pf.concurrent() {
		return p.concurrency(f, what, pol, &pf, given) && ok
	}
	switch {
	case pf.limStr != nil && given:
		p.errf(pf.limStr.key, "%s: give either limit or algorithm/rate/period/burst, not both", what)
		return false
	case pf.limStr != nil:
		s, good := p.str(pf.limStr.val, what+": limit")
		if good {
			lim, err := ratewarden.ParseLimit(s)
			if err != nil {
				p.errf(pf.limStr.val, "%s: limit: %v", what, err)
				good = false
			}
			pol.Limit = lim
		}
		return ok && good
	case !given:
		p.errf(f.key, "%s: no limit: give limit (e.g. \"100/1m\") or rate and period", what)
		return false
	case !ok:
		return false
	}
	lim, good := p.policyLimit(f, what, pf)
	pol.Limit = lim
	return good
}

// policyField reads one field of a policy mapping.
func (p *parser) policyField(pf field, what string, pol *Policy, out *policyFields) bool {
	w := what + ": " + pf.name
	switch pf.name {
	case "limit":
		out.limStr = &pf
	case "algorithm":
		s, good := p.str(pf.val, w)
		if good {
			a, err := ratewarden.ParseAlgorithm(s)
			if err != nil {
				p.errf(pf.val, "%s: unknown algorithm %q (want sliding_window, fixed_window, token_bucket or sliding_log)", w, s)
				good = false
			}
			out.alg, out.algSet = a, true
		}
		return good
	case "rate":
		v, good := p.integer(pf.val, w, 1, ratewarden.MaxRate)
		out.rate = v
		return good
	case "burst":
		v, good := p.integer(pf.val, w, 0, ratewarden.MaxRate)
		out.burst = v
		return good
	case "period":
		s, good := p.str(pf.val, w)
		out.period = s
		return good
	case "failure_policy":
		fp, good := p.failure(pf.val, w)
		pol.Failure = fp
		return good
	case "shadow_mode":
		b, good := p.boolean(pf.val, w)
		pol.Shadow, out.shadow = b, &pf
		return good
	case "max_in_flight":
		v, good := p.integer(pf.val, w, 1, ratewarden.MaxPermits)
		out.maxInFlight = v
		if !good {
			out.maxInFlight = 0 // given, though wrong: still a concurrency policy
		}
		return good
	case "ttl":
		out.ttl = &pf
	}
	return true
}

// concurrency builds the Concurrency of a policy that gave max_in_flight
// or ttl; given reports that it gave a rate limit's fields too.
func (p *parser) concurrency(f field, what string, pol *Policy, pf *policyFields, given bool) bool {
	switch {
	case pf.limStr != nil || given:
		p.errf(f.key, "%s: give either max_in_flight and ttl (a concurrency limit) or a rate limit (limit, or algorithm/rate/period/burst), not both", what)
		return false
	case pf.shadow != nil && pol.Shadow:
		p.errf(pf.shadow.key, "%s: shadow_mode applies only to rate limits, not to a concurrency limit (max_in_flight)", what)
		return false
	case pf.maxInFlight == limitUnset:
		p.errf(f.key, "%s: max_in_flight is required with ttl (the most permits of a key held at once)", what)
		return false
	case pf.ttl == nil:
		p.errf(f.key, "%s: ttl is required with max_in_flight (how long a permit is held unless released or extended, e.g. 30s)", what)
		return false
	case pf.maxInFlight == 0:
		return false // reported by policyField
	}
	s, ok := p.str(pf.ttl.val, what+": ttl")
	if !ok {
		return false
	}
	ttl, err := parsePeriod(s)
	if err != nil {
		p.errf(pf.ttl.val, "%s: ttl %q: %v", what, s, err)
		return false
	}
	// The fields' own checks name them; the library has the last word on
	// what Limiter.Acquire takes.
	if err := ratewarden.ValidatePermit(pf.maxInFlight, ttl); err != nil {
		p.errf(f.key, "%s: %v", what, err)
		return false
	}
	pol.Concurrency = &Concurrency{MaxInFlight: pf.maxInFlight, TTL: ttl}
	return true
}

// parsePeriod reads a period of ParseLimit's grammar, a count and a unit
// ms, s, m, h or d ("30s"), from MinPeriod to MaxPeriod.
func parsePeriod(s string) (time.Duration, error) {
	lim, err := ratewarden.ParseLimit("1/" + s)
	if err != nil || strings.ContainsAny(s, " \t") {
		return 0, fmt.Errorf("want a count and a unit ms, s, m, h or d (e.g. 30s), from %v to %v", ratewarden.MinPeriod, ratewarden.MaxPeriod)
	}
	return lim.Period, nil
}

// policyLimit builds the Limit of a policy given by its fields; an
// algorithm not named is ratewarden.DefaultAlgorithm.
func (p *parser) policyLimit(f field, what string, pf policyFields) (ratewarden.Limit, bool) {
	ok := true
	if pf.rate == limitUnset {
		p.errf(f.key, "%s: rate is required", what)
		ok = false
	}
	if pf.period == "" {
		p.errf(f.key, "%s: period is required (e.g. 1s, 1m, 1h, 1d)", what)
		ok = false
	}
	if !ok {
		return ratewarden.Limit{}, false
	}
	period, err := parsePeriod(pf.period) // not ParseLimit alone: "1m burst 2 token_bucket" is no period
	if err != nil {
		p.errf(f.key, "%s: period %q: want a count and a unit ms, s, m, h or d, e.g. 1m", what, pf.period)
		return ratewarden.Limit{}, false
	}
	alg := pf.alg
	if !pf.algSet {
		alg = ratewarden.DefaultAlgorithm
	}
	lim := ratewarden.Limit{Algorithm: alg, Rate: pf.rate, Period: period}
	if pf.burst != limitUnset {
		lim.Burst = pf.burst
	}
	if err := lim.Validate(); err != nil {
		p.errf(f.key, "%s: %v", what, err)
		return lim, false
	}
	return lim, true
}

func (p *parser) policy(f field) {
	name := f.name
	what := "policy " + strconv.Quote(name)
	if name == "" {
		p.errf(f.key, "policies: a policy name must not be empty")
		return
	}
	pol := &Policy{Name: name, Source: p.where(f.key)}
	ok := true
	if f.val.Kind == yaml.ScalarNode && f.val.Tag != "!!null" {
		// shorthand: name: "100/1m"
		lim, err := ratewarden.ParseLimit(f.val.Value)
		if err != nil {
			p.errf(f.val, "%s: %v", what, err)
			ok = false
		}
		pol.Limit = lim
	} else {
		ok = p.policyMapping(f, what, pol)
	}
	if !ok {
		return
	}
	if prev, dup := p.l.cfg.Policies[name]; dup {
		p.errf(f.key, "policy %q is already defined at %s", name, prev.Source)
		return
	}
	p.l.cfg.Policies[name] = pol
}
