package redisstore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// ParseURL is redisurl's grammar (its tests walk it) with Sentinel
// clients refreshing every DefaultSentinelRefresh and errors that name
// the package; RedactURL is redisurl's redaction.
func TestParseURL(t *testing.T) {
	o, err := ParseURL("redis-sentinel://s1,s2:26380/mymaster/2")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.InitAddress, []string{"s1:26379", "s2:26380"}) || o.Sentinel.MasterSet != "mymaster" || o.SelectDB != 2 ||
		o.Sentinel.TopologyRefreshInterval != DefaultSentinelRefresh || !o.DisableCache {
		t.Errorf("ParseURL(redis-sentinel://...) = %+v; want two sentinels, master set mymaster, db 2, refresh %v, no client cache", o, DefaultSentinelRefresh)
	}
	o, err = ParseURL("redis://user:hunter2@h?bogus=1")
	const want = `redisstore: connection URL: unknown parameter "bogus": invalid config`
	if err == nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || err.Error() != want {
		t.Errorf("ParseURL with an unknown parameter: %v; want %q wrapping ErrInvalidConfig", err, want)
	}
	if len(o.InitAddress) != 0 || o.Password != "" || o.DisableCache {
		t.Errorf("ParseURL returned settings with its error: %+v", o)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://user:hunter2@h:6379/0":          "redis://user:xxxxx@h:6379/0",
		"redis://u:hunter2@h1:7000,h2:7001?db=0": "redis://u:xxxxx@h1:7000,h2:7001?db=0", // url.Parse refuses it
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
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
