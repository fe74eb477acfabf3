package redisurl

import (
	"crypto/tls"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/redis/rueidis"
)

// refresh is the Sentinel refresh the tests pass to Parse (redisstore
// passes DefaultSentinelRefresh): no other duration in the tests, nor
// rueidis' default, equals it.
const refresh = 7 * time.Second

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		url   string
		check func(t *testing.T, o rueidis.ClientOption)
	}{
		{"redis://127.0.0.1:6380", func(t *testing.T, o rueidis.ClientOption) {
			wantAddrs(t, o, "127.0.0.1:6380")
			if o.TLSConfig != nil || o.Username != "" || o.Password != "" || o.SelectDB != 0 || o.Sentinel.MasterSet != "" {
				t.Errorf("unexpected settings: %+v", o)
			}
		}},
		{"redis://localhost", func(t *testing.T, o rueidis.ClientOption) { wantAddrs(t, o, "localhost:6379") }},
		{"redis://[::1]", func(t *testing.T, o rueidis.ClientOption) { wantAddrs(t, o, "[::1]:6379") }},
		{"redis://[::1]:7000", func(t *testing.T, o rueidis.ClientOption) { wantAddrs(t, o, "[::1]:7000") }},
		{"redis://limiter:p%40ss%3Aword@h:1/2", func(t *testing.T, o rueidis.ClientOption) {
			if o.Username != "limiter" || o.Password != "p@ss:word" || o.SelectDB != 2 {
				t.Errorf("user %q password %q db %d", o.Username, o.Password, o.SelectDB)
			}
		}},
		{"redis://:secret@h?db=4", func(t *testing.T, o rueidis.ClientOption) {
			if o.Username != "" || o.Password != "secret" || o.SelectDB != 4 {
				t.Errorf("user %q password %q db %d", o.Username, o.Password, o.SelectDB)
			}
		}},
		{"rediss://cache.example.com:6380", func(t *testing.T, o rueidis.ClientOption) {
			if o.TLSConfig == nil || o.TLSConfig.ServerName != "cache.example.com" || o.TLSConfig.InsecureSkipVerify || o.TLSConfig.MinVersion != tls.VersionTLS12 {
				t.Errorf("TLS %+v", o.TLSConfig)
			}
		}},
		{"rediss://h?skip_verify=true", func(t *testing.T, o rueidis.ClientOption) {
			if o.TLSConfig == nil || !o.TLSConfig.InsecureSkipVerify {
				t.Errorf("TLS %+v", o.TLSConfig)
			}
		}},
		{"redis://a:7000,b:7001,c", func(t *testing.T, o rueidis.ClientOption) { wantAddrs(t, o, "a:7000", "b:7001", "c:6379") }},
		{"redis://a:7000?addr=b:7001&addr=c:7002", func(t *testing.T, o rueidis.ClientOption) { wantAddrs(t, o, "a:7000", "b:7001", "c:7002") }},
		{"redis-sentinel://app:pw@s1,s2:26380,s3/mymaster/3?sentinel_user=sen&sentinel_password=sp", func(t *testing.T, o rueidis.ClientOption) {
			wantAddrs(t, o, "s1:26379", "s2:26380", "s3:26379")
			if o.Sentinel.MasterSet != "mymaster" || o.SelectDB != 3 || o.Username != "app" || o.Password != "pw" ||
				o.Sentinel.Username != "sen" || o.Sentinel.Password != "sp" || o.Sentinel.TopologyRefreshInterval != refresh || o.TLSConfig != nil || o.Sentinel.TLSConfig != nil {
				t.Errorf("sentinel settings: %+v", o)
			}
		}},
		{"redis-sentinel://s1/my%20set?sentinel_refresh=0s&db=1", func(t *testing.T, o rueidis.ClientOption) {
			if o.Sentinel.MasterSet != "my set" || o.Sentinel.TopologyRefreshInterval != 0 || o.SelectDB != 1 {
				t.Errorf("sentinel settings: %+v", o.Sentinel)
			}
		}},
		// rueidis' own Sentinel form reads the same as redis-sentinel://.
		{"redis://s1:26379?master_set=mymaster&addr=s2:26379&sentinel_user=u", func(t *testing.T, o rueidis.ClientOption) {
			wantAddrs(t, o, "s1:26379", "s2:26379")
			if o.Sentinel.MasterSet != "mymaster" || o.Sentinel.Username != "u" || o.Sentinel.TopologyRefreshInterval != refresh {
				t.Errorf("sentinel settings: %+v", o.Sentinel)
			}
		}},
		{"rediss-sentinel://s1/m", func(t *testing.T, o rueidis.ClientOption) {
			if o.TLSConfig == nil || o.Sentinel.TLSConfig == nil || o.Sentinel.TLSConfig == o.TLSConfig {
				t.Errorf("TLS %+v, sentinel TLS %+v", o.TLSConfig, o.Sentinel.TLSConfig)
			}
		}},
		{"redis://h?pipeline_multiplex=3&max_flush_delay=20us&auto_pipelining=false&pool_size=64&shards_refresh=10s&dial_timeout=1s&write_timeout=3s&client_name=api&protocol=2&max_retries=0",
			func(t *testing.T, o rueidis.ClientOption) {
				if o.PipelineMultiplex != 3 || o.MaxFlushDelay != 20*time.Microsecond || !o.DisableAutoPipelining || o.BlockingPoolSize != 64 ||
					o.ClusterOption.ShardsRefreshInterval != 10*time.Second || o.Dialer.Timeout != time.Second || o.ConnWriteTimeout != 3*time.Second ||
					o.ClientName != "api" || !o.AlwaysRESP2 || !o.DisableRetry {
					t.Errorf("knobs: %+v", o)
				}
			}},
		{"redis://h?auto_pipelining=true", func(t *testing.T, o rueidis.ClientOption) {
			if o.DisableAutoPipelining || o.AlwaysRESP2 || o.DisableRetry || o.PipelineMultiplex != 0 {
				t.Errorf("defaults changed: %+v", o)
			}
		}},
		{"unix:///run/redis.sock?db=1", func(t *testing.T, o rueidis.ClientOption) {
			if !slices.Equal(o.InitAddress, []string{"/run/redis.sock"}) || o.DialCtxFn == nil || o.SelectDB != 1 {
				t.Errorf("unix: %v %d", o.InitAddress, o.SelectDB)
			}
		}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			o, err := Parse(tc.url, refresh)
			if err != nil {
				t.Fatal(err)
			}
			if !o.DisableCache {
				t.Error("DisableCache must be set")
			}
			tc.check(t, o)
		})
	}
}

func wantAddrs(t *testing.T, o rueidis.ClientOption, addrs ...string) {
	t.Helper()
	if !slices.Equal(o.InitAddress, addrs) {
		t.Errorf("InitAddress = %q, want %q", o.InitAddress, addrs)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"", "no scheme"},
		{"127.0.0.1:6379", "no scheme"},
		{"http://h", `unknown scheme "http"`},
		{"redis:h", "no scheme"},
		{"redis://", "empty host"},
		{"redis://a:1,,b:2", "empty host"},
		{"redis://h:port", "port"},
		{"redis://h:70000", "bad port"},
		{"redis://h%zz", "bad host"},
		{"redis://[nope]:1", "IPv6"},
		{"redis://a:b:c", "brackets"},
		{"redis://h?bogus=1", `unknown parameter "bogus"`},
		{"redis://h?client_cache=1", "client_cache"},
		{"redis://h?pipeline_multiplex=99", "pipeline_multiplex"},
		{"redis://h?pool_size=0", "pool_size"},
		{"redis://h?max_flush_delay=soon", "max_flush_delay"},
		{"redis://h?shards_refresh=-1s", "shards_refresh"},
		{"redis://h?auto_pipelining=maybe", "auto_pipelining"},
		{"redis://h?dial_timeout=x", "dial timeout"},
		{"redis://h?protocol=4", "protocol"},
		{"redis://h?max_retries=-1", "max_retries"},
		{"redis://h?db=1&db=2", "db given 2 times"},
		{"redis://h/x", "database"},
		{"redis://h/1/2", "path"},
		{"redis://h?db=-1", "database number"},
		{"redis://h?addr=nope", "parameter addr"},
		{"redis://h?skip_verify=true", "needs TLS"},
		{"redis://h?sentinel_password=x", "sentinel_"},
		{"redis-sentinel://s1:26379", "master set"},
		{"redis-sentinel://s1:26379/", "master set"},
		{"redis-sentinel://s1/m/1?db=2", "both"},
		{"redis-sentinel://s1/m?addr=s2:1", "comma-separated"},
		{"redis-sentinel://s1/m?master_set=n", "master_set"},
		{"redis://s1?master_set=", "master_set"},
		{"redis://s1?master_set=a&master_set=b", "master_set"},
		{"unix:///tmp/r.sock?master_set=m", "master_set"},
	} {
		o, err := Parse(tc.url, refresh)
		if err == nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "connection URL: ") {
			t.Errorf("Parse(%q) = %v; want ErrInvalidConfig mentioning %q", tc.url, err, tc.want)
		}
		if !isZero(o) {
			t.Errorf("Parse(%q) returned settings with its error", tc.url)
		}
	}
	// The password never shows in an error, even when url.Parse fails.
	for _, u := range []string{"redis://user:hunter2@h?bogus=1", "redis://user:hunter2@h:1:2", "redis://user:hunter2@h%zz", "redis://user:hunter2@h?db=x"} {
		if _, err := Parse(u, refresh); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Parse(%q) = %v; want an error without the password", u, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://h:6379":                         "redis://h:6379",
		"redis://user:hunter2@h:6379/0":          "redis://user:xxxxx@h:6379/0",
		"redis://:hunter2@h":                     "redis://:xxxxx@h",
		"redis://u:hunter2@h1:7000,h2:7001?db=0": "redis://u:xxxxx@h1:7000,h2:7001?db=0", // url.Parse refuses it
		"redis-sentinel://u:p%40ss@s1,s2/m":      "redis-sentinel://u:xxxxx@s1,s2/m",
		"redis://u:hunter2@h%zz":                 "redis://u:xxxxx@h%zz",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// isZero reports whether o carries nothing (of the fields Parse sets).
func isZero(o rueidis.ClientOption) bool {
	return len(o.InitAddress) == 0 && o.TLSConfig == nil && o.Password == "" && !o.DisableCache && o.Sentinel.MasterSet == ""
}
