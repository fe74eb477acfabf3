package config_test

import (
	"fmt"
	"strings"

	"github.com/ratewarden/ratewarden/service/config"
)

// ExampleLoader_Parse merges two documents of one Envoy domain, as
// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does; without MergeDomains
// the second is refused.
func ExampleLoader_Parse() {
	yaml := []byte(`
domain: shop
descriptors:
  - {key: region, value: eu, rate_limit: {unit: minute, requests_per_unit: 10}}
---
domain: shop
descriptors:
  - {key: region, value: us, rate_limit: {unit: minute, requests_per_unit: 20}}
`)
	_, err := config.Parse("shop.yaml", yaml)
	fmt.Println(err)
	cfg, err := config.Loader{MergeDomains: true}.Parse("shop.yaml", yaml)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range cfg.Domains["shop"].Descriptors {
		fmt.Println(d.Path, d.RateLimit.RequestsPerUnit, d.RateLimit.Unit)
	}
	// Output:
	// config: 1 problem
	//   shop.yaml:6: domain "shop" is already defined at shop.yaml:2 (merging them takes --merge-domains, envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)
	// region=eu 10 minute
	// region=us 20 minute
}

// ExampleDomain_MatchPath walks a request descriptor's entries through a
// domain: an exact value wins, then the first wildcard listed (here the
// shorter one), then the key alone. A share_threshold wildcard makes every
// value it matches count on one counter.
func ExampleDomain_MatchPath() {
	cfg, err := config.Parse("files.yaml", []byte(`
domain: files
descriptors:
  - key: path
    value: /docs/*
    share_threshold: true
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: /docs/private/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 50}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	d := cfg.Domains["files"]
	for _, entries := range [][]config.Entry{
		{{Key: "path", Value: "/docs/private/a"}, {Key: "method", Value: "GET"}},
		{{Key: "path", Value: "/img/logo.png"}},
	} {
		var out []string
		for _, n := range d.MatchPath(entries) {
			out = append(out, fmt.Sprintf("%s (shared %v)", n.Path, n.ShareThreshold))
		}
		fmt.Println(strings.Join(out, ", "))
	}
	// Output:
	// path=/docs/* (shared true), path=/docs/*.method (shared false)
	// path (shared false)
}
