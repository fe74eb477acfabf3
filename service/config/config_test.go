package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/service/config"
)

// TestInvalidFixtures loads each file of testdata/invalid and checks the
// problems it reports: every message with its file:line.
func TestInvalidFixtures(t *testing.T) {
	cases := map[string][]string{
		"bad_yaml.yaml":                         {"bad_yaml.yaml:3: invalid YAML: mapping values are not allowed in this context"},
		"unknown_key.yaml":                      {`unknown_key.yaml:7: descriptors[0].rate_limit: unknown key "request_per_unit" (want unit, requests_per_unit, unlimited, name, replaces, algorithm, burst, failure_policy)`},
		"duplicate_descriptor.yaml":             {"duplicate_descriptor.yaml:8: descriptors[1]: duplicate descriptor client_id=partner (already defined at ", "duplicate_descriptor.yaml:3)"},
		"bad_unit.yaml":                         {`bad_unit.yaml:5: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`},
		"negative_rate.yaml":                    {"negative_rate.yaml:6: descriptors[0].rate_limit.requests_per_unit must not be negative, got -5"},
		"missing_key.yaml":                      {"missing_key.yaml:3: descriptors[0]: key is required"},
		"duplicate_domain.yaml":                 {`duplicate_domain.yaml:6: domain "edge" is already defined at `, "duplicate_domain.yaml:1"},
		"duplicate_policy.yaml":                 {`duplicate_policy.yaml:5: policy "api" is already defined at `, "duplicate_policy.yaml:2"},
		"duplicate_yaml_key.yaml":               {`duplicate_yaml_key.yaml:3: policies: key "api" given twice (first at line 2)`},
		"unlimited_with_unit.yaml":              {"unlimited_with_unit.yaml:6: descriptors[0].rate_limit: an unlimited rate_limit must not set a unit"},
		"missing_unit.yaml":                     {"missing_unit.yaml:5: descriptors[0].rate_limit: unit is required (second, minute, hour, day, week, month or year) unless unlimited is true"},
		"bad_algorithm.yaml":                    {`bad_algorithm.yaml:7: descriptors[0].rate_limit.algorithm: unknown algorithm "leaky_bucket"`},
		"burst_without_token_bucket.yaml":       {"burst_without_token_bucket.yaml:5: descriptors[0].rate_limit: ratewarden: burst applies only to token_bucket, got burst 20 with fixed_window"},
		"bad_policy_limit.yaml":                 {`bad_policy_limit.yaml:2: policy "api": ratewarden: period "1fortnight"`},
		"zero_rate_policy.yaml":                 {`zero_rate_policy.yaml:3: policy "api": rate must be between 1 and 1000000000000, got 0`},
		"limit_and_fields.yaml":                 {`limit_and_fields.yaml:3: policy "api": give either limit or algorithm/rate/period/burst, not both`},
		"bad_failure_policy.yaml":               {`bad_failure_policy.yaml:1: failure_policy: unknown failure policy "fail_sometimes" (want fail_open, fail_closed or local_fallback)`},
		"not_a_mapping.yaml":                    {"not_a_mapping.yaml:1: a config document must be a mapping"},
		"empty_domain.yaml":                     {"empty_domain.yaml:1: domain is missing: it must not be empty"},
		"missing_domain.yaml":                   {"missing_domain.yaml:2: domain is missing: an Envoy document with descriptors needs a domain"},
		"replaces_self.yaml":                    {`replaces_self.yaml:9: descriptors[0].rate_limit.replaces[0]: names this rate_limit itself ("carts"): a limit cannot replace itself`},
		"share_threshold_without_wildcard.yaml": {`share_threshold_without_wildcard.yaml:3: descriptors[0]: share_threshold applies only to a wildcard value (one ending in *), got value "fixed-value"`},
		"descriptors_not_mappings.yaml": {
			`descriptors_not_mappings.yaml:3: descriptors[0] must be a mapping, got "checkout"`,
			`descriptors_not_mappings.yaml:4: descriptors[1] must be a mapping, got "browse"`,
		},
		"bad_quota_mode.yaml":        {`bad_quota_mode.yaml:4: descriptors[0].quota_mode must be true or false (or yes/no, on/off), got "sometimes"`},
		"bad_shadow_mode.yaml":       {`bad_shadow_mode.yaml:4: descriptors[0].shadow_mode must be true or false (or yes/no, on/off), got "maybe"`},
		"replaces_without_name.yaml": {"replaces_without_name.yaml:8: descriptors[0].rate_limit.replaces[0]: name is required"},
		"many_problems.yaml": {
			`many_problems.yaml:6: descriptors[0].rate_limit.unit: unknown unit "fortnight"`,
			"many_problems.yaml:8: descriptors[1]: key is required",
			`many_problems.yaml:12: descriptors[2]: unknown key "bogus"`,
		},
	}
	ents, err := os.ReadDir("testdata/invalid")
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(cases) {
		t.Errorf("testdata/invalid has %d files, the table %d: keep them in step", len(ents), len(cases))
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", "invalid", name)
			cfg, err := config.Load(path)
			if err == nil {
				t.Fatalf("Load(%s) = %v, want an error", name, cfg)
			}
			if cfg != nil {
				t.Errorf("Load returned a Config along with an error")
			}
			if !errors.Is(err, ratewarden.ErrInvalidConfig) {
				t.Errorf("error does not match ErrInvalidConfig: %v", err)
			}
			msg := err.Error()
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain\n%s", msg, w)
				}
			}
			if n := len(config.Problems(err)); n != len(want) && name != "duplicate_descriptor.yaml" && name != "duplicate_domain.yaml" && name != "duplicate_policy.yaml" {
				t.Errorf("%d problems, want %d:\n%s", n, len(want), msg)
			}
		})
	}
}

func TestExampleConfigsLoad(t *testing.T) {
	for _, f := range []string{"ratewarden.yaml", "envoy-example.yaml"} {
		path := filepath.Join("..", "..", "examples", "config", f)
		if _, err := config.Load(path); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	// The whole directory at once: the domains differ, so it loads too.
	cfg, err := config.Load(filepath.Join("..", "..", "examples", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Domains) != 2 || len(cfg.Files) != 2 {
		t.Errorf("directory load: %d domains from %v, want 2 from 2 files", len(cfg.Domains), cfg.Files)
	}
}

func TestNativePolicies(t *testing.T) {
	cfg, err := config.Parse("p.yaml", []byte(`
failure_policy: fail_closed
policies:
  short: 10/1s burst 20 token_bucket
  long:
    algorithm: sliding_log
    rate: 50
    period: 1h
    failure_policy: fail_open
    shadow_mode: true
  str:
    limit: 3/1m
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Failure != fallback.FailClosed {
		t.Errorf("Failure = %q", cfg.Failure)
	}
	want := map[string]ratewarden.Limit{
		"short": {Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 20},
		"long":  {Algorithm: ratewarden.SlidingLog, Rate: 50, Period: time.Hour},
		"str":   ratewarden.PerMinute(3),
	}
	for name, lim := range want {
		p := cfg.Policies[name]
		if p == nil {
			t.Fatalf("policy %s missing", name)
		}
		if p.Limit != lim {
			t.Errorf("%s: limit %v, want %v", name, p.Limit, lim)
		}
	}
	if p := cfg.Policies["long"]; p.Failure != fallback.FailOpen || !p.Shadow || p.Source != "p.yaml:5" {
		t.Errorf("long: %+v", p)
	}
}

func TestMatch(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "..", "examples", "config", "envoy-example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Domains["edge"]
	e := func(kv ...string) []config.Entry {
		var out []config.Entry
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, config.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	cases := []struct {
		entries []config.Entry
		path    string // "" = no match
	}{
		{e("remote_address", "10.0.0.1"), "remote_address"},
		{e("client_id", "partner"), "client_id=partner"},
		{e("client_id", "someone"), "client_id"},
		{e("client_id", "internal"), "client_id=internal"},
		{e("path", "/login", "remote_address", "1.2.3.4"), "path=/login.remote_address"},
		{e("path", "/login"), "path=/login"}, // matches a node without a rate_limit
		{e("path", "/api/users"), "path=/api/*"},
		{e("path", "/apiary"), ""},
		{e("path", "/admin"), "path=/admin"},
		{e("remote_address", "1.2.3.4", "path", "/x"), ""}, // entries left over
		{e("nope", "x"), ""},
	}
	for _, c := range cases {
		n := d.Match(c.entries)
		got := ""
		if n != nil {
			got = n.Path
		}
		if got != c.path {
			t.Errorf("Match(%v) = %q, want %q", c.entries, got, c.path)
		}
	}
	if n := d.Match(e("path", "/login")); n.RateLimit != nil {
		t.Errorf("/login alone has a rate limit: %+v", n.RateLimit)
	}
	if rl := d.Match(e("api_key", "k")).RateLimit; rl.Limit != (ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 5, Period: time.Second, Burst: 10}) {
		t.Errorf("api_key limit = %v", rl.Limit)
	}
	if rl := d.Match(e("remote_address", "x")).RateLimit; rl.Limit != (ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Second}) {
		t.Errorf("remote_address limit = %v", rl.Limit)
	}
}

func TestFingerprintChangesWithContents(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(f, []byte("policies: {a: 1/1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := config.Fingerprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("policies: {a: 2/1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := config.Fingerprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Error("fingerprint did not change with the contents")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"policies: {a: 1/1s}",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3}\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: v*\n    descriptors: [{key: x}]\n",
		"- [",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := config.Parse("fuzz.yaml", []byte(s))
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse returned cfg=%v err=%v: want exactly one", cfg, err)
		}
		for _, p := range config.Problems(err) {
			if p.File != "fuzz.yaml" || p.Msg == "" {
				t.Fatalf("bad problem %+v", p)
			}
		}
	})
}

// TestEmptyConfigRefused: a configuration with no policies and no domains
// (an empty or truncated file, comments only, a directory without config
// files) is refused: loaded, it would lift every limit.
func TestEmptyConfigRefused(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.yaml")
	comments := filepath.Join(dir, "comments.yaml")
	noDir := t.TempDir()
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(comments, []byte("# nothing yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, paths := range [][]string{{empty}, {comments}, {dir}, {noDir}, {empty, comments}} {
		cfg, err := config.Load(paths...)
		if cfg != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) {
			t.Fatalf("Load(%v) = %v, %v; want an invalid-config error", paths, cfg, err)
		}
		if ps := config.Problems(err); len(ps) != 1 || !strings.Contains(ps[0].Msg, "no policies or domains") || ps[0].File != strings.Join(paths, ", ") {
			t.Errorf("Load(%v) problems %v", paths, ps)
		}
	}
	if cfg, err := config.Parse("p.yaml", []byte("policies: {}\n")); cfg != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Errorf("Parse(policies: {}) = %v, %v", cfg, err)
	}
}

// TestEnvoyUnitsAndYAML11Booleans: envoyproxy/ratelimit reads every unit of
// the RLS proto (week, month and year too, any case) and, through a YAML
// 1.1 parser, yes/no/on/off as booleans; both load the same here.
func TestEnvoyUnitsAndYAML11Booleans(t *testing.T) {
	cfg, err := config.Parse("e.yaml", []byte(`
domain: d
descriptors:
  - key: w
    shadow_mode: yes
    rate_limit: {unit: week, requests_per_unit: 7}
  - key: m
    shadow_mode: ON
    detailed_metric: On
    rate_limit: {unit: MONTH, requests_per_unit: 30}
  - key: y
    shadow_mode: no
    detailed_metric: Y
    rate_limit: {unit: Year, requests_per_unit: 365}
  - key: u
    shadow_mode: off
    rate_limit: {unlimited: YES}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Domains["d"]
	e := func(k string) *config.Descriptor { return d.Match([]config.Entry{{Key: k, Value: "x"}}) }
	day := 24 * time.Hour
	for k, want := range map[string]time.Duration{"w": 7 * day, "m": 30 * day, "y": 365 * day} {
		if got := e(k).RateLimit.Limit.Period; got != want {
			t.Errorf("%s: period %v, want %v", k, got, want)
		}
	}
	if n := e("w"); !n.Shadow || n.RateLimit.Unit != "week" {
		t.Errorf("w: shadow %v unit %q", n.Shadow, n.RateLimit.Unit)
	}
	if n := e("m"); !n.Shadow || !n.DetailedMetric || n.RateLimit.Unit != "month" {
		t.Errorf("m: shadow %v detailed %v unit %q", n.Shadow, n.DetailedMetric, n.RateLimit.Unit)
	}
	if n := e("y"); n.Shadow || !n.DetailedMetric {
		t.Errorf("y: shadow %v detailed %v", n.Shadow, n.DetailedMetric)
	}
	if n := e("u"); n.Shadow || !n.RateLimit.Unlimited {
		t.Errorf("u: shadow %v unlimited %v", n.Shadow, n.RateLimit.Unlimited)
	}
	// A quoted string is a string, in YAML 1.1 too; so is anything else.
	for _, v := range []string{`"off"`, `'yes'`, "maybe", "1"} {
		_, err := config.Parse("b.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: "+v+"\n"))
		ps := config.Problems(err)
		if len(ps) != 1 || ps[0].Line != 4 || !strings.Contains(ps[0].Msg, "shadow_mode must be true or false (or yes/no, on/off)") {
			t.Errorf("shadow_mode: %s: %v", v, err)
		}
	}
	// The native format is YAML 1.2: yes is a string there.
	if _, err := config.Parse("n.yaml", []byte("policies:\n  p: {limit: 1/1s, shadow_mode: yes}\n")); err == nil {
		t.Error("native shadow_mode: yes accepted")
	}
}

func TestInlineLimits(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte("policies: {api: 1/1s}\ninline_limits:\n  enabled: true\n  max_period: 10m\n  max_rate: 500\n  max_sliding_log: 50\n  max_cost: 20\n"))
	if err != nil {
		t.Fatal(err)
	}
	il := cfg.Inline
	if il == nil || !il.Enabled || il.MaxPeriod != 10*time.Minute || il.MaxRate != 500 || il.MaxSlidingLog != 50 || il.MaxCost != 20 || il.Source != "t.yaml:2" {
		t.Fatalf("inline limits %+v", il)
	}
	if cfg, err := config.Parse("t.yaml", []byte("policies: {api: 1/1s}\n")); err != nil || cfg.Inline != nil {
		t.Fatalf("not set: %+v, %v", cfg.Inline, err)
	}
	for _, bad := range []string{
		"inline_limits: {enabled: yes please}",
		"inline_limits: {max_period: forever}",
		"inline_limits: {max_rate: 0}",
		"inline_limits: {max_cost: -1}",
		"inline_limits: {max_entries: 5}",
		"inline_limits: true",
	} {
		_, err := config.Parse("t.yaml", []byte("policies: {api: 1/1s}\n"+bad+"\n"))
		if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "inline_limits") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	d := config.InlineLimits{}.WithDefaults()
	for _, c := range []struct {
		lim  string
		cost int64
		want string
	}{
		{"10000/366d sliding_log", 10000, "max_period"},
		{"10000/1m sliding_log", 1, "max_sliding_log"},
		{"20000/1m fixed_window", 1, "max_rate"},
		{"10/1m burst 20000 token_bucket", 1, "max_rate"},
		{"100/1m", 5000, "max_cost"},
		{"100/1m", 5, ""},
	} {
		lim, err := ratewarden.ParseLimit(c.lim)
		if err != nil {
			t.Fatal(err)
		}
		err = d.Check(lim, c.cost)
		if c.want == "" && err != nil || c.want != "" && (!errors.Is(err, ratewarden.ErrInvalidLimit) || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Check(%s, %d) = %v, want %q", c.lim, c.cost, err, c.want)
		}
	}
}

// A token bucket's key lives until the bucket is full again, Burst/Rate
// periods: that time, not the period alone, is held to max_period.
func TestInlineTokenBucketRefillWithinMaxPeriod(t *testing.T) {
	il := config.InlineLimits{Enabled: true}.WithDefaults() // max_period 1h, max_rate 10000
	long := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Hour, Burst: 10000}
	if err := il.Check(long, 1); !errors.Is(err, ratewarden.ErrInvalidLimit) || !strings.Contains(err.Error(), "inline_limits.max_period") {
		t.Errorf("Check(%v) = %v, want refused naming inline_limits.max_period", long, err)
	}
	ok := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 20} // refills in 2 s
	if err := il.Check(ok, 1); err != nil {
		t.Errorf("Check(%v) = %v, want nil", ok, err)
	}
}
