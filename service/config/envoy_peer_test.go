package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/service/config"
)

// TestPeerAcceptedConfigs: documents envoyproxy/ratelimit's loader
// accepts (each checked against it) load here too, with its meaning.
func TestPeerAcceptedConfigs(t *testing.T) {
	cases := []struct {
		name, yaml string
		check      func(*config.Domain) bool
		warnings   int
	}{
		{"unlimited ignores requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n",
			func(d *config.Domain) bool { return d.Descriptors[0].RateLimit.Unlimited }, 0},
		{"unlimited ignores a unit that is not one", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: fortnight}\n",
			func(d *config.Domain) bool { return d.Descriptors[0].RateLimit.Unlimited }, 0},
		{"requests_per_unit defaults to 0", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n",
			func(d *config.Domain) bool {
				rl := d.Descriptors[0].RateLimit
				return rl.RequestsPerUnit == 0 && !rl.Counted()
			}, 0},
		{"a known key in the wrong place is ignored", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}\n",
			func(d *config.Domain) bool { return !d.Descriptors[0].Shadow }, 1},
		{"numbers as strings", "domain: 123\ndescriptors:\n  - key: a\n    value: 456\n    rate_limit: {unit: second, requests_per_unit: 0x10}\n",
			func(d *config.Domain) bool {
				return d.Name == "123" && d.Descriptors[0].Value == "456" && d.Descriptors[0].RateLimit.RequestsPerUnit == 16
			}, 0},
		{"rate_limit with nothing is none", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n",
			func(d *config.Domain) bool { return d.Descriptors[0].RateLimit == nil }, 0},
		{"a key given twice: the last counts", "domain: d\ndescriptors:\n  - key: a\n    key: b\n    rate_limit: {unit: second, requests_per_unit: 1, unit: minute}\n",
			func(d *config.Domain) bool {
				return d.Descriptors[0].Key == "b" && d.Descriptors[0].RateLimit.Unit == "minute"
			}, 2},
		{"a field with nothing is as if not given", "domain: d\ndescriptors:\n  - key: a\n    value:\n    shadow_mode:\n    rate_limit: {unit: second, requests_per_unit: , name: }\n",
			func(d *config.Domain) bool {
				n := d.Descriptors[0]
				return n.Value == "" && !n.Shadow && n.RateLimit.RequestsPerUnit == 0 && n.RateLimit.Name == ""
			}, 0},
		{"no descriptors", "domain: d\ndescriptors:\n", func(d *config.Domain) bool { return len(d.Descriptors) == 0 }, 0},
		{"share_threshold on a key ending in *", "domain: d\ndescriptors:\n  - key: \"b*\"\n    share_threshold: true\n",
			func(d *config.Domain) bool { return d.Descriptors[0].ShareThreshold }, 0},
		{"every flag, YAML 1.1 booleans", "domain: d\ndescriptors:\n  - key: a\n    value: x*\n    shadow_mode: on\n    quota_mode: Yes\n    detailed_metric: TRUE\n    value_to_metric: y\n    share_threshold: true\n    rate_limit: {unit: WEEK, requests_per_unit: 3}\n",
			func(d *config.Domain) bool {
				n := d.Descriptors[0]
				return n.Shadow && n.QuotaMode && n.DetailedMetric && n.ValueToMetric && n.ShareThreshold && n.Prefix && n.RateLimit.Unit == "week"
			}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse("peer.yaml", []byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			var d *config.Domain
			for _, x := range cfg.Domains {
				d = x // the only one
			}
			if !c.check(d) {
				t.Errorf("loaded as %+v", d.Descriptors)
			}
			if len(cfg.Warnings) != c.warnings {
				t.Errorf("warnings %v, want %d", cfg.Warnings, c.warnings)
			}
		})
	}
}

// TestWildcardConfigOrder: of overlapping wildcards the first listed wins,
// whichever is longer; an exact value wins over both, and a * before the
// end is a literal character.
func TestWildcardConfigOrder(t *testing.T) {
	load := func(values ...string) *config.Domain {
		var b strings.Builder
		b.WriteString("domain: w\ndescriptors:\n")
		for _, v := range values {
			b.WriteString("  - key: k\n    value: \"" + v + "\"\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
		}
		cfg, err := config.Parse("w.yaml", []byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Domains["w"]
	}
	match := func(d *config.Domain, v string) string {
		n := d.Match([]config.Entry{{Key: "k", Value: v}})
		if n == nil {
			return ""
		}
		return n.Path
	}
	short, long := load("a*", "ab*", "abc"), load("ab*", "a*", "abc")
	for _, c := range []struct {
		d       *config.Domain
		v, want string
	}{
		{short, "abz", "k=a*"}, {long, "abz", "k=ab*"}, {long, "az", "k=a*"},
		{short, "abc", "k=abc"}, {long, "abc", "k=abc"},
	} {
		if got := match(c.d, c.v); got != c.want {
			t.Errorf("%q matched %q, want %q", c.v, got, c.want)
		}
	}
	lit := load("a*z", "foo*bar*baz", "foo*bar*")
	for v, want := range map[string]string{"a*z": "k=a*z", "abz": "", "foo*bar*baz": "k=foo*bar*baz", "fooXbarYbaz": "", "foo*barQ": "k=foo*bar*", "fooXbarQ": ""} {
		if got := match(lit, v); got != want {
			t.Errorf("%q matched %q, want %q", v, got, want)
		}
	}
}

// TestMergeDomains: Loader.MergeDomains loads one domain from two files as
// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does; without it the second
// is refused with a message naming the setting, and merged descriptors
// must still differ.
func TestMergeDomains(t *testing.T) {
	dir := filepath.Join("testdata", "merge")
	if _, err := config.Load(dir); err == nil || !strings.Contains(err.Error(), "--merge-domains") {
		t.Fatalf("Load = %v, want a duplicate domain naming --merge-domains", err)
	}
	cfg, err := config.Loader{MergeDomains: true}.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Domains["orders"]
	if len(d.Descriptors) != 2 || d.Failure != fallback.FailOpen || d.Match([]config.Entry{{Key: "region", Value: "us"}}).RateLimit.RequestsPerUnit != 20 {
		t.Errorf("merged domain %+v", d)
	}
	_, err = config.Loader{MergeDomains: true}.Load(filepath.Join("testdata", "merge_duplicate"))
	if ps := config.Problems(err); len(ps) != 1 || !strings.Contains(ps[0].String(), `b.yaml:2: domain "orders": duplicate descriptor region=eu`) {
		t.Errorf("merged duplicate: %v", err)
	}
}
