package redisurl

import (
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// urlParam is one query parameter of the grammar redisstore.ParseURL
// documents.
type urlParam struct {
	name string
	// rueidis: handed on to rueidis.ParseURL, which reads it (checkParsed
	// then refuses what rueidis accepts but the Store does not).
	rueidis bool
	// apply reads the value into the option (applyTuning). Parameters with
	// neither are read where their meaning lives: addr and master_set with
	// the hosts, sentinel_* in applySentinel, client_cache in checkParams.
	apply func(opt *rueidis.ClientOption, v string) error
}

// urlParams is every parameter Parse knows; any other is an error.
var urlParams = []urlParam{
	{name: "db", rueidis: true},
	{name: "dial_timeout", rueidis: true},
	{name: "write_timeout", rueidis: true},
	{name: "client_name", rueidis: true},
	{name: "protocol", rueidis: true},
	{name: "max_retries", rueidis: true},
	{name: "skip_verify", rueidis: true},
	{name: "pipeline_multiplex", apply: intParam(0, rueidis.MaxPipelineMultiplex, func(o *rueidis.ClientOption, n int) { o.PipelineMultiplex = n })},
	{name: "pool_size", apply: intParam(1, 1<<20, func(o *rueidis.ClientOption, n int) { o.BlockingPoolSize = n })},
	{name: "max_flush_delay", apply: durParam(func(o *rueidis.ClientOption, d time.Duration) { o.MaxFlushDelay = d })},
	{name: "shards_refresh", apply: durParam(func(o *rueidis.ClientOption, d time.Duration) { o.ClusterOption.ShardsRefreshInterval = d })},
	{name: "sentinel_refresh", apply: durParam(func(o *rueidis.ClientOption, d time.Duration) { o.Sentinel.TopologyRefreshInterval = d })},
	{name: "auto_pipelining", apply: func(o *rueidis.ClientOption, v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		o.DisableAutoPipelining = !on
		return nil
	}},
	{name: "addr"},
	{name: "master_set"},
	{name: "sentinel_user"},
	{name: "sentinel_password"},
	{name: "client_cache"},
	{name: "tls_ca_file"},
	{name: "tls_cert_file"},
	{name: "tls_key_file"},
	{name: "tls_server_name"},
}

func paramNamed(name string) *urlParam {
	for i := range urlParams {
		if urlParams[i].name == name {
			return &urlParams[i]
		}
	}
	return nil
}

// intParam reads an integer from lo to hi.
func intParam(lo, hi int, set func(*rueidis.ClientOption, int)) func(*rueidis.ClientOption, string) error {
	return func(o *rueidis.ClientOption, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("want an integer from %d to %d, got %q", lo, hi, v)
		}
		set(o, n)
		return nil
	}
}

// durParam reads a duration >= 0.
func durParam(set func(*rueidis.ClientOption, time.Duration)) func(*rueidis.ClientOption, string) error {
	return func(o *rueidis.ClientOption, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("want a duration >= 0 such as 5s or 20us, got %q", v)
		}
		set(o, d)
		return nil
	}
}
