package redisstore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"go.uber.org/goleak"
)

// testPKI writes a CA and two certificates it signed, for 127.0.0.1 (the
// server) and a client, as PEM files in dir; it returns their paths.
func testPKI(t *testing.T, dir, prefix string) (ca, serverCert, serverKey, clientCert, clientKey string) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, prefix+name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: prefix + "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage, name string) (string, string) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kb)
	}
	ca = write("ca.crt", "CERTIFICATE", caDER)
	serverCert, serverKey = leaf(2, x509.ExtKeyUsageServerAuth, "server")
	clientCert, clientKey = leaf(3, x509.ExtKeyUsageClientAuth, "client")
	return
}

// rediss:// with tls_ca_file, tls_cert_file and tls_key_file reaches a
// redis-server that verifies clients; without the client certificate, or
// against another CA, it does not. (redisurl tests the parameters alone.)
func TestURLTLS(t *testing.T) {
	dir := t.TempDir()
	ca, srvCert, srvKey, cliCert, cliKey := testPKI(t, dir, "a-")
	otherCA, _, _, _, _ := testPKI(t, dir, "b-")
	port, err := testredis.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	testredis.Start(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", srvCert, "--tls-key-file", srvKey,
		"--tls-ca-cert-file", ca, "--tls-auth-clients", "yes")
	defer settle(t, goleak.IgnoreCurrent()) // failed dials leave rueidis' retry timers running a while
	base := "rediss://127.0.0.1:" + strconv.Itoa(port) + "?dial_timeout=2s&"
	c, err := ClientFromURL(base + "tls_ca_file=" + ca + "&tls_cert_file=" + cliCert + "&tls_key_file=" + cliKey)
	if err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	defer c.Close()
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := check(s, "tls", ratewarden.PerMinute(5), 1); err != nil || !r.Allowed {
		t.Fatalf("check over TLS: %+v, %v", r, err)
	}
	for name, q := range map[string]string{
		"no client certificate": "tls_ca_file=" + ca,
		"another CA":            "tls_ca_file=" + otherCA + "&tls_cert_file=" + cliCert + "&tls_key_file=" + cliKey,
	} {
		if c, err := ClientFromURL(base + q); err == nil {
			c.Close()
			t.Errorf("%s: connected", name)
		}
	}
}
