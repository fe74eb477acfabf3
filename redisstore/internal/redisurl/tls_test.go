package redisurl

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
)

// writeCert writes a self-signed CA certificate and its key as PEM files
// into dir and returns their paths. (redisstore's TestURLTLS connects
// with such files to a redis-server; here they are only read.)
func writeCert(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redisurl test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for p, b := range map[string]*pem.Block{cert: {Type: "CERTIFICATE", Bytes: der}, key: {Type: "EC PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(p, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key
}

// The tls_* parameters load their files into the TLS configuration, for
// Redis and the sentinels alike; a file that is missing or holds the
// wrong thing, half a key pair, or tls_* without TLS is an error naming
// the parameter.
func TestTLSParams(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)

	opt, err := Parse("rediss://127.0.0.1?tls_ca_file="+cert+"&tls_cert_file="+cert+"&tls_key_file="+key, refresh)
	if err != nil {
		t.Fatal(err)
	}
	if c := opt.TLSConfig; c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "127.0.0.1" {
		t.Errorf("rediss:// with tls_ca_file, tls_cert_file and tls_key_file: RootCAs %v, %d certificates, ServerName %q; want the CA, one certificate, 127.0.0.1",
			c.RootCAs != nil, len(c.Certificates), c.ServerName)
	}
	opt, err = Parse("rediss-sentinel://127.0.0.1/mymaster?tls_ca_file="+cert+"&tls_server_name=redis.internal", refresh)
	if err != nil {
		t.Fatal(err)
	}
	if opt.TLSConfig.RootCAs == nil || opt.TLSConfig.ServerName != "redis.internal" || opt.Sentinel.TLSConfig == nil ||
		opt.Sentinel.TLSConfig.RootCAs == nil || opt.Sentinel.TLSConfig.ServerName != "redis.internal" || opt.Sentinel.TLSConfig == opt.TLSConfig {
		t.Errorf("rediss-sentinel:// with tls_*: %+v / %+v; want the CA and name for Redis and, in a copy, the sentinels", opt.TLSConfig, opt.Sentinel.TLSConfig)
	}

	for q, want := range map[string]string{
		"rediss://h?tls_ca_file=" + filepath.Join(dir, "missing"):               "parameter tls_ca_file",
		"rediss://h?tls_ca_file=" + key:                                         "no PEM certificate",
		"rediss://h?tls_cert_file=" + cert:                                      "go together",
		"rediss://h?tls_key_file=" + key:                                        "go together",
		"rediss://h?tls_cert_file=" + cert + "&tls_key_file=" + cert:            "parameters tls_cert_file and tls_key_file",
		"redis://h?tls_ca_file=" + cert:                                         "need TLS",
		"redis-sentinel://h/m?tls_server_name=x":                                "need TLS",
		"unix:///run/redis.sock?tls_cert_file=" + cert + "&tls_key_file=" + key: "need TLS",
	} {
		if o, err := Parse(q, refresh); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), want) || !isZero(o) {
			t.Errorf("Parse(%q) = %v; want ErrInvalidConfig naming %q and no options", q, err, want)
		}
	}
}
