package xds

import (
	"fmt"
	"strings"

	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden"
	svcconfig "github.com/ratewarden/ratewarden/service/config"
)

// The YAML form of a RateLimitConfig: envoyproxy/ratelimit's file format,
// which the config package reads and checks.
type yamlDomain struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors,omitempty"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value,omitempty"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit,omitempty"`
	Descriptors    []yamlDescriptor `yaml:"descriptors,omitempty"`
	ShadowMode     bool             `yaml:"shadow_mode,omitempty"`
	DetailedMetric bool             `yaml:"detailed_metric,omitempty"`
}

type yamlRateLimit struct {
	Unit            string        `yaml:"unit,omitempty"`
	RequestsPerUnit uint32        `yaml:"requests_per_unit"`
	Unlimited       bool          `yaml:"unlimited,omitempty"`
	Name            string        `yaml:"name,omitempty"`
	Replaces        []yamlReplace `yaml:"replaces,omitempty"`
}

type yamlReplace struct {
	Name string `yaml:"name"`
}

// Convert turns RateLimitConfig resources into a configuration, checked
// as the files of envoyproxy/ratelimit's format are (config.Loader): one
// domain per resource; two resources of one domain are refused unless
// merge is set, then their descriptors are appended in order. Problems
// name the resource ("xds resource NAME") and wrap
// ratewarden.ErrInvalidConfig. No resources is a configuration without
// domains.
func Convert(resources []*rlsconfpb.RateLimitConfig, merge bool) (*svcconfig.Config, error) {
	var all []byte
	for i, r := range resources {
		if r == nil {
			return nil, fmt.Errorf("xds: resource %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		doc, err := yaml.Marshal(toYAML(r))
		if err != nil {
			return nil, fmt.Errorf("xds: resource %q: %v: %w", r.GetName(), err, ratewarden.ErrInvalidConfig)
		}
		// Each resource alone first, so that a problem names it.
		if _, err := svcconfig.Parse(resourceName(r), doc); err != nil {
			return nil, err
		}
		if i > 0 {
			all = append(all, "---\n"...)
		}
		all = append(all, doc...)
	}
	if len(resources) == 0 {
		// No rate limit configuration at all is a state the management
		// server may mean (every policy deleted); a file without limits is
		// refused as a likely mistake, an xDS response is the authority.
		return &svcconfig.Config{Policies: map[string]*svcconfig.Policy{}, Domains: map[string]*svcconfig.Domain{}}, nil
	}
	return svcconfig.Loader{MergeDomains: merge}.Parse("xds resources", all)
}

func resourceName(r *rlsconfpb.RateLimitConfig) string {
	return fmt.Sprintf("xds resource %q", r.GetName())
}

func toYAML(r *rlsconfpb.RateLimitConfig) yamlDomain {
	return yamlDomain{Domain: r.GetDomain(), Descriptors: descriptorsYAML(r.GetDescriptors())}
}

func descriptorsYAML(ds []*rlsconfpb.RateLimitDescriptor) []yamlDescriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]yamlDescriptor, len(ds))
	for i, d := range ds {
		out[i] = yamlDescriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      rateLimitYAML(d.GetRateLimit()),
			Descriptors:    descriptorsYAML(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
		}
	}
	return out
}

// rateLimitYAML is a policy in the file format. The proto's zero unit,
// UNKNOWN, is "not given": fine for an unlimited policy, refused by the
// config package for any other.
func rateLimitYAML(p *rlsconfpb.RateLimitPolicy) *yamlRateLimit {
	if p == nil {
		return nil
	}
	y := &yamlRateLimit{RequestsPerUnit: p.GetRequestsPerUnit(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
	switch u := p.GetUnit(); {
	case u != rlsconfpb.RateLimitUnit_UNKNOWN:
		y.Unit = strings.ToLower(u.String())
	case !p.GetUnlimited():
		y.Unit = "unknown"
	}
	for _, r := range p.GetReplaces() {
		y.Replaces = append(y.Replaces, yamlReplace{Name: r.GetName()})
	}
	return y
}
