package config

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden"
)

// Units are the rate_limit units of the Envoy format and their periods:
// every unit of the rate limit service's proto, with the lengths
// envoyproxy/ratelimit gives them (a month is 30 days, a year 365). All
// fit in ratewarden.MaxPeriod (366 days).
var Units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

// unitNames lists Units for messages.
const unitNames = "second, minute, hour, day, week, month or year"

// DefaultEnvoyAlgorithm counts Envoy limits when rate_limit names no
// algorithm: epoch-aligned fixed windows, as envoyproxy/ratelimit does, so
// a migrated config admits what it admitted before.
const DefaultEnvoyAlgorithm = ratewarden.FixedWindow

func (p *parser) domain(n *yaml.Node) {
	fields, _ := p.mapping(n, "domain document", "domain", "descriptors", "failure_policy")
	d := &Domain{Source: p.where(n)}
	ok := true
	var descs *yaml.Node
	for _, f := range fields {
		switch f.name {
		case "domain":
			s, good := p.str(f.val, "domain")
			if good && s == "" {
				p.errf(f.val, "domain is missing: it must not be empty")
				good = false
			}
			d.Name, d.Source, ok = s, p.where(f.key), ok && good
		case "failure_policy":
			fp, good := p.failure(f.val, "failure_policy")
			d.Failure, ok = fp, ok && good
		case "descriptors":
			descs = f.val
		}
	}
	if d.Name == "" && ok {
		p.errf(n, "domain is missing: it must not be empty")
		ok = false
	}
	if descs != nil {
		var good bool
		d.Descriptors, good = p.descriptors(descs, "descriptors", "")
		ok = ok && good
	}
	if !ok {
		return
	}
	prev, dup := p.l.cfg.Domains[d.Name]
	switch {
	case !dup:
		p.l.cfg.Domains[d.Name] = d
	case !p.l.merge:
		p.errf(n, "domain %q is already defined at %s (merging them takes --merge-domains, envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)", d.Name, prev.Source)
	default:
		p.mergeDomain(n, prev, d)
	}
}

// mergeDomain adds the descriptors of d, a second document of the same
// domain, to prev, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does: a
// descriptor both define is a duplicate, and so are two failure policies
// that differ.
func (p *parser) mergeDomain(n *yaml.Node, prev, d *Domain) {
	if d.Failure != 0 && prev.Failure != 0 && d.Failure != prev.Failure {
		p.errf(n, "domain %q: failure_policy %s conflicts with %s of its part at %s", d.Name, d.Failure, prev.Failure, prev.Source)
		return
	}
	have := map[string]*Descriptor{}
	for _, x := range prev.Descriptors {
		have[descID(x)] = x
	}
	for _, x := range d.Descriptors {
		if old, dup := have[descID(x)]; dup {
			p.errf(n, "domain %q: duplicate descriptor %s at %s (already defined at %s)", d.Name, x.Path, x.Source, old.Source)
			return
		}
	}
	// A new Domain: the old one may be in use elsewhere until Load returns.
	merged := *prev
	merged.Descriptors = append(slices.Clip(prev.Descriptors), d.Descriptors...)
	if merged.Failure == 0 {
		merged.Failure = d.Failure
	}
	p.l.cfg.Domains[d.Name] = &merged
}

// descID identifies a descriptor among its siblings.
func descID(d *Descriptor) string {
	return d.Key + "\x00" + d.Value + "\x00" + strconv.FormatBool(d.Prefix)
}

// descriptors parses one level of the tree.
func (p *parser) descriptors(n *yaml.Node, what, parentPath string) ([]*Descriptor, bool) {
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		p.errf(n, "%s must be a list, got %s", what, kindName(n))
		return nil, false
	}
	ok := true
	var out []*Descriptor
	seen := map[string]*Descriptor{}
	for i, item := range n.Content {
		w := what + "[" + strconv.Itoa(i) + "]"
		d, good := p.descriptor(deref(item), w, parentPath)
		if !good {
			ok = false
			continue
		}
		id := descID(d)
		if prev, dup := seen[id]; dup {
			p.errf(item, "%s: duplicate descriptor %s (already defined at %s)", w, d.Path, prev.Source)
			ok = false
			continue
		}
		seen[id] = d
		out = append(out, d)
	}
	return out, ok
}

func (p *parser) descriptor(n *yaml.Node, what, parentPath string) (*Descriptor, bool) {
	fields, isMap := p.mapping(n, what, "key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
		"detailed_metric", "value_to_metric", "share_threshold")
	if !isMap {
		return nil, false
	}
	d := &Descriptor{Source: p.where(n)}
	ok, hasKey := true, false
	var rl *field
	var children *yaml.Node
	for _, f := range fields {
		w := what + "." + f.name
		switch f.name {
		case "key":
			s, good := p.str(f.val, w)
			if good && s == "" {
				p.errf(f.val, "%s must not be empty", w)
				good = false
			}
			d.Key, hasKey, ok = s, true, ok && good
		case "value":
			s, good := p.str(f.val, w)
			if good && strings.HasSuffix(s, "*") {
				d.Prefix, s = true, strings.TrimSuffix(s, "*")
			}
			d.Value, ok = s, ok && good
		case "rate_limit":
			rl = &f
		case "descriptors":
			children = f.val
		default:
			ok = p.descriptorFlag(f, w, d) && ok
		}
	}
	if !hasKey {
		p.errf(n, "%s: key is required", what)
		ok = false
	}
	// envoyproxy/ratelimit takes a key ending in * with no value as a
	// wildcard too (its own quirk, see docs/service.md); ratewarden
	// accepts share_threshold there and it changes nothing.
	if d.ShareThreshold && !d.Prefix && (d.Value != "" || !strings.HasSuffix(d.Key, "*")) {
		p.errf(n, "%s: share_threshold applies only to a wildcard value (one ending in *), got %s", what, descValue(d))
		ok = false
	}
	d.Path = descPath(d, parentPath)
	if rl != nil && (rl.val.Kind != yaml.ScalarNode || rl.val.Tag != "!!null") { // rate_limit: with nothing is none
		r, good := p.rateLimit(rl.val, what+".rate_limit")
		d.RateLimit, ok = r, ok && good
	}
	if children != nil {
		c, good := p.descriptors(children, what+".descriptors", d.Path)
		d.Descriptors, ok = c, ok && good
	}
	return d, ok
}

// descPath is the Path of d under parentPath.
func descPath(d *Descriptor, parentPath string) string {
	path := d.Key
	switch {
	case d.Prefix:
		path += "=" + d.Value + "*"
	case d.Value != "":
		path += "=" + d.Value
	}
	if parentPath != "" {
		path = parentPath + "." + path
	}
	return path
}

// descriptorFlag reads one of a descriptor's booleans.
func (p *parser) descriptorFlag(f field, w string, d *Descriptor) bool {
	b, good := p.boolean11(f.val, w)
	switch f.name {
	case "shadow_mode":
		d.Shadow = b
	case "quota_mode":
		d.QuotaMode = b
	case "detailed_metric":
		d.DetailedMetric = b
	case "value_to_metric":
		d.ValueToMetric = b
	case "share_threshold":
		d.ShareThreshold = b
	}
	return good
}

// descValue quotes a descriptor's value as the config wrote it, for
// messages.
func descValue(d *Descriptor) string {
	switch {
	case d.Prefix:
		return strconvQuote(d.Value + "*")
	case d.Value == "":
		return "no value"
	}
	return strconvQuote(d.Value)
}

func strconvQuote(s string) string { return "value " + strconv.Quote(s) }

// rateLimitFields holds what a rate_limit mapping gave besides the
// RateLimit's own fields.
type rateLimitFields struct {
	unitNode  *yaml.Node
	unitValid bool // unit names one of Units
	alg       ratewarden.Algorithm
	burst     int64
	replaces  []*yaml.Node // the replaces entries, for messages
}

// rateLimit reads a rate_limit mapping with envoyproxy/ratelimit's rules:
// unit is required, and must be a known one, unless unlimited is true, and
// then it must not be a known one; requests_per_unit defaults to 0 (always
// over the limit) and is ignored when unlimited; a limit must not replace
// itself.
func (p *parser) rateLimit(n *yaml.Node, what string) (*RateLimit, bool) {
	fields, isMap := p.mapping(n, what, "unit", "requests_per_unit", "unlimited", "name", "replaces",
		"algorithm", "burst", "failure_policy")
	if !isMap {
		return nil, false
	}
	r := &RateLimit{}
	rf := rateLimitFields{alg: DefaultEnvoyAlgorithm}
	ok := true
	for _, f := range fields {
		ok = p.rateLimitField(f, what, r, &rf) && ok
	}
	for i, name := range r.Replaces {
		if name == r.Name {
			p.errf(rf.replaces[i], "%s.replaces[%d]: names this rate_limit itself (%q): a limit cannot replace itself", what, i, name)
			ok = false
		}
	}
	if !ok {
		return nil, false
	}
	if r.Unlimited {
		if rf.unitValid {
			p.errf(rf.unitNode, "%s: an unlimited rate_limit must not set a unit", what)
			return nil, false
		}
		r.Unit, r.RequestsPerUnit = "", 0
		return r, true
	}
	switch {
	case rf.unitNode == nil:
		p.errf(n, "%s: unit is required (%s) unless unlimited is true", what, unitNames)
		return nil, false
	case !rf.unitValid:
		p.errf(rf.unitNode, "%s.unit: unknown unit %q (want %s)", what, rf.unitNode.Value, unitNames)
		return nil, false
	}
	if r.RequestsPerUnit > 0 {
		r.Limit = ratewarden.Limit{Algorithm: rf.alg, Rate: int64(r.RequestsPerUnit), Period: Units[r.Unit], Burst: rf.burst}
		if err := r.Limit.Validate(); err != nil {
			p.errf(n, "%s: %v", what, err)
			return nil, false
		}
	}
	return r, true
}

// rateLimitField reads one field of a rate_limit mapping.
func (p *parser) rateLimitField(f field, what string, r *RateLimit, rf *rateLimitFields) bool {
	w := what + "." + f.name
	var good bool
	switch f.name {
	case "unit":
		// Checked once unlimited is known: an unlimited rate_limit
		// ignores a unit that is not one, as envoyproxy/ratelimit does.
		var s string
		s, good = p.str(f.val, w)
		_, rf.unitValid = Units[strings.ToLower(s)]
		r.Unit, rf.unitNode = strings.ToLower(s), f.val
	case "requests_per_unit":
		var v int64
		v, good = p.integer(f.val, w, 0, 1<<32-1)
		r.RequestsPerUnit = uint32(v)
	case "unlimited":
		r.Unlimited, good = p.boolean11(f.val, w)
	case "name":
		r.Name, good = p.str(f.val, w)
	case "replaces":
		r.Replaces, rf.replaces, good = p.replaces(f.val, w)
	case "algorithm":
		var s string
		if s, good = p.str(f.val, w); good {
			a, err := ratewarden.ParseAlgorithm(s)
			if err != nil {
				p.errf(f.val, "%s: unknown algorithm %q (want fixed_window, sliding_window, token_bucket or sliding_log)", w, s)
				good = false
			}
			rf.alg = a
		}
	case "burst":
		rf.burst, good = p.integer(f.val, w, 0, ratewarden.MaxRate)
	case "failure_policy":
		r.Failure, good = p.failure(f.val, w)
	default:
		good = true
	}
	return good
}

// replaces reads a replaces list: the names, and the entries they came from.
func (p *parser) replaces(n *yaml.Node, what string) ([]string, []*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		p.errf(n, "%s must be a list of {name: ...}, got %s", what, kindName(n))
		return nil, nil, false
	}
	ok := true
	var out []string
	var nodes []*yaml.Node
	for i, item := range n.Content {
		w := what + "[" + strconv.Itoa(i) + "]"
		fields, isMap := p.mapping(item, w, "name")
		if !isMap {
			ok = false
			continue
		}
		name := ""
		for _, f := range fields {
			name, _ = p.str(f.val, w+".name")
		}
		if name == "" {
			p.errf(item, "%s: name is required", w)
			ok = false
			continue
		}
		out, nodes = append(out, name), append(nodes, item)
	}
	return out, nodes, ok
}

// boolean11 reads a boolean of the Envoy format as envoyproxy/ratelimit's
// YAML 1.1 parser does: a plain (unquoted, untagged) true/false,
// yes/no, on/off or y/n, in lower, title or upper case. A quoted value is
// a string there too, and refused.
func (p *parser) boolean11(n *yaml.Node, what string) (bool, bool) {
	plain := n.Style&(yaml.TaggedStyle|yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0
	if n.Kind == yaml.ScalarNode && plain && (n.Tag == "!!bool" || n.Tag == "!!str") {
		switch n.Value {
		case "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y":
			return true, true
		case "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N":
			return false, true
		}
	}
	p.errf(n, "%s must be true or false (or yes/no, on/off), got %s", what, kindName(n))
	return false, false
}
