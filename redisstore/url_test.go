package redisstore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestParseURL(t *testing.T) {
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
				o.Sentinel.Username != "sen" || o.Sentinel.Password != "sp" || o.Sentinel.TopologyRefreshInterval != DefaultSentinelRefresh || o.TLSConfig != nil || o.Sentinel.TLSConfig != nil {
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
			if o.Sentinel.MasterSet != "mymaster" || o.Sentinel.Username != "u" || o.Sentinel.TopologyRefreshInterval != DefaultSentinelRefresh {
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
			o, err := ParseURL(tc.url)
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

func TestParseURLErrors(t *testing.T) {
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
		o, err := ParseURL(tc.url)
		if err == nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "redisstore: ") {
			t.Errorf("ParseURL(%q) = %v; want ErrInvalidConfig mentioning %q", tc.url, err, tc.want)
		}
		if !reflectZero(o) {
			t.Errorf("ParseURL(%q) returned settings with its error", tc.url)
		}
	}
	// The password never shows in an error, even when url.Parse fails.
	for _, u := range []string{"redis://user:hunter2@h?bogus=1", "redis://user:hunter2@h:1:2", "redis://user:hunter2@h%zz", "redis://user:hunter2@h?db=x"} {
		if _, err := ParseURL(u); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseURL(%q) = %v; want an error without the password", u, err)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://h:6379":                         "redis://h:6379",
		"redis://user:hunter2@h:6379/0":          "redis://user:xxxxx@h:6379/0",
		"redis://:hunter2@h":                     "redis://:xxxxx@h",
		"redis://u:hunter2@h1:7000,h2:7001?db=0": "redis://u:xxxxx@h1:7000,h2:7001?db=0", // url.Parse refuses it
		"redis-sentinel://u:p%40ss@s1,s2/m":      "redis-sentinel://u:xxxxx@s1,s2/m",
		"redis://u:hunter2@h%zz":                 "redis://u:xxxxx@h%zz",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// reflectZero reports whether o carries nothing (the fields ParseURL
// sets).
func reflectZero(o rueidis.ClientOption) bool {
	return len(o.InitAddress) == 0 && o.TLSConfig == nil && o.Password == "" && !o.DisableCache && o.Sentinel.MasterSet == ""
}

// allowOnce checks one request through a Store on c.
func allowOnce(t *testing.T, c rueidis.Client, key string) ratewarden.Result {
	t.Helper()
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := ratewarden.New(s)
	r, err := lim.Allow(bg, key, ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 5, Period: time.Minute})
	if err != nil || !r.Allowed || r.Remaining != 4 {
		t.Fatalf("Allow(%q) = %+v, %v; want allowed with 4 remaining", key, r, err)
	}
	return r
}

func TestClientFromURLStandaloneACL(t *testing.T) {
	srv := testredis.Start(t)
	// An ACL user that may only touch the Store's keys.
	do(t, srv, "ACL", "SETUSER", "limiter", "on", ">s3cr@t", "~rw:*", "+@all")
	c, err := ClientFromURL("redis://limiter:s3cr%40t@" + srv.Addr + "/0?client_name=rw-test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	allowOnce(t, c, "user:1")
	if got := do(t, srv, "EXISTS", "rw:{user:1}s1m"); got != "1" {
		t.Fatalf("state key missing: EXISTS = %s", got)
	}
	if list := do(t, srv, "CLIENT", "LIST"); !strings.Contains(list, "name=rw-test") || !strings.Contains(list, "user=limiter") {
		t.Fatalf("CLIENT LIST shows no connection named rw-test as limiter:\n%s", list)
	}

	// A client that failed to connect leaves a delayed topology refresh
	// behind in rueidis, which ends within a second.
	defer settle(t, goleak.IgnoreCurrent())

	// A wrong password is a connect error that names neither password.
	_, err = ClientFromURL("redis://limiter:wrong-pw@" + srv.Addr)
	if err == nil || !errors.Is(err, ratewarden.ErrStoreUnavailable) || strings.Contains(err.Error(), "wrong-pw") || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v; want ErrStoreUnavailable with WRONGPASS and no password", err)
	}
	// Nothing listening: an error too.
	port, _ := testredis.FreePort()
	if _, err := ClientFromURL("redis://127.0.0.1:" + strconv.Itoa(port) + "?dial_timeout=1s"); !errors.Is(err, ratewarden.ErrStoreUnavailable) {
		t.Fatalf("nothing listening: %v; want ErrStoreUnavailable", err)
	}
	// A bad URL fails before any connection.
	if _, err := ClientFromURL("redis://" + srv.Addr + "?nope=1"); !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Fatalf("bad URL: %v; want ErrInvalidConfig", err)
	}
}

func TestClientFromURLDatabaseAndKnobs(t *testing.T) {
	srv := testredis.Start(t)
	c, err := ClientFromURL("redis://" + srv.Addr + "/3?pipeline_multiplex=0&max_flush_delay=20us&auto_pipelining=false&pool_size=4")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	allowOnce(t, c, "k")
	if got := do(t, srv, "EXISTS", "rw:{k}s1m"); got != "0" {
		t.Fatal("the state went to database 0, want 3")
	}
	if got := do(t, srv, "SELECT", "3"); got != "OK" {
		t.Fatal(got)
	}
	if info := do(t, srv, "INFO", "keyspace"); !strings.Contains(info, "db3:keys=1") {
		t.Fatalf("INFO keyspace: %s; want one key in db3", info)
	}
}

func TestClientFromURLUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	srv := testredis.Start(t, "--unixsocket", sock, "--unixsocketperm", "700")
	c, err := ClientFromURL("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	allowOnce(t, c, "over-unix")
	if got := do(t, srv, "EXISTS", "rw:{over-unix}s1m"); got != "1" {
		t.Fatal("no state written over the socket")
	}
}

func TestClientFromURLTLS(t *testing.T) {
	dir := t.TempDir()
	certPEM := writeSelfSigned(t, dir)
	port, err := testredis.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	srv := testredis.Start(t,
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "cert.pem"),
		"--tls-key-file", filepath.Join(dir, "key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "cert.pem"),
		"--tls-auth-clients", "no")
	url := "rediss://127.0.0.1:" + strconv.Itoa(port)

	defer settle(t, goleak.IgnoreCurrent())
	// The certificate is not from a system root: verification fails.
	if _, err := ClientFromURL(url + "?dial_timeout=2s"); err == nil || !errors.Is(err, ratewarden.ErrStoreUnavailable) {
		t.Fatalf("unverifiable certificate: %v; want ErrStoreUnavailable", err)
	}

	// With the CA in RootCAs it verifies (for 127.0.0.1, the URL's host).
	opt, err := ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	opt.TLSConfig.RootCAs = pool
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	allowOnce(t, c, "tls")

	// skip_verify connects without verifying (for tests only).
	c2, err := ClientFromURL(url + "?skip_verify=true")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	allowOnce(t, c2, "tls-unverified")
	if got := do(t, srv, "EXISTS", "rw:{tls}s1m", "rw:{tls-unverified}s1m"); got != "2" {
		t.Fatalf("EXISTS over TLS-written keys = %s, want 2", got)
	}
}

// settle waits (at most 30 s: far more than they take, even on a busy
// machine) until only the goroutines ignored by opt run, so goroutines a
// failed rueidis connect left behind have ended before the package's leak
// check.
func settle(t *testing.T, opt goleak.Option) {
	t.Helper()
	const settleCap = 30 * time.Second
	var err error
	for deadline := time.Now().Add(settleCap); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = goleak.Find(opt); err == nil {
			return
		}
	}
	t.Errorf("goroutines left %v after failed connects: %v", settleCap, err)
}

// writeSelfSigned writes cert.pem and key.pem, a self-signed certificate
// for 127.0.0.1, into dir and returns the certificate's PEM.
func writeSelfSigned(t *testing.T, dir string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ratewarden test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPEM
}
