package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ratewarden/ratewarden/internal/testredis"
)

// handshake dials addr over TLS with the given client certificate (nil:
// none) and returns the server certificate's serial number.
func handshake(addr string, roots *x509.CertPool, client *tls.Certificate) (string, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	// TLS 1.3: the server checks the client certificate after the
	// client's handshake ends; a read shows a refusal.
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := conn.Read(make([]byte, 1)); err != nil && !strings.Contains(err.Error(), "timeout") {
		return "", err
	}
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestServeTLS: gRPC and HTTP over TLS with certificates made here,
// client certificates required (mutual TLS), and a certificate rotated
// on disk served without a restart.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir)
	certFile, keyFile := ca.issue(t, dir, "server", "ratewarden.test", false)
	ccert, ckey := ca.issue(t, dir, "client", "envoy.test", true)
	client, err := tls.LoadX509KeyPair(ccert, ckey)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := writeFile(t, dir, "edge.yaml", peerDomain)
	s := startServe(t, map[string]string{}, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--config", cfgFile, "--log-format", "json",
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", ca.file)

	first, err := handshake(s.grpc, ca.pool, &client)
	if err != nil {
		t.Fatalf("gRPC TLS handshake with a client certificate: %v", err)
	}
	if _, err := handshake(s.grpc, ca.pool, nil); err == nil {
		t.Error("gRPC TLS without a client certificate: accepted")
	}
	// A real gRPC call over mutual TLS.
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{client}})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}})
	if err != nil || resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Fatalf("ShouldRateLimit over mutual TLS: %v, %v", resp, err)
	}
	// HTTP over TLS too.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{client}}}}
	defer hc.CloseIdleConnections()
	hr, err := hc.Get("https://" + s.http + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	if hr.StatusCode != 200 || string(body) != "OK" {
		t.Errorf("https /healthcheck: %d %q", hr.StatusCode, body)
	}

	// Rotate: a new certificate in the same files.
	ca.issue(t, dir, "server", "ratewarden.test", false)
	start := time.Now()
	var now string
	for i := 0; i < 100; i++ { // the files are looked at once a second at most
		time.Sleep(50 * time.Millisecond)
		if now, err = handshake(s.grpc, ca.pool, &client); err == nil && now != first {
			break
		}
	}
	if now == first || err != nil {
		t.Fatalf("after %v the server still presents serial %s (err %v)", time.Since(start), first, err)
	}
	t.Logf("rotated certificate served %v after it was written", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(s.logs.String(), "TLS certificate reloaded") {
		t.Error("no log line on the reload")
	}
	// A broken pair on disk keeps the certificate in force.
	writePEM(t, certFile, "CERTIFICATE", []byte("not a certificate"))
	for i := 0; i < 100 && !strings.Contains(s.logs.String(), "do not load"); i++ {
		time.Sleep(50 * time.Millisecond)
		_, _ = handshake(s.grpc, ca.pool, &client)
	}
	if got, err := handshake(s.grpc, ca.pool, &client); err != nil || got != now {
		t.Errorf("with broken files on disk: serial %s, %v; want the rotated %s", got, err, now)
	}
	if !strings.Contains(s.logs.String(), "do not load; keeping the certificate in force") {
		t.Error("no log line on the broken files")
	}
}

// TestServeRedisTLS: the service decides on a redis-server that speaks
// only TLS on the port it is given and requires client certificates,
// with --redis-ca, --redis-cert and --redis-key on a rediss:// URL.
func TestServeRedisTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir)
	scert, skey := ca.issue(t, dir, "redis", "127.0.0.1", false)
	ccert, ckey := ca.issue(t, dir, "client", "ratewarden", true)
	port, err := testredis.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr := "127.0.0.1:" + itoa(port)
	testredis.Start(t, "--tls-port", itoa(port), "--tls-cert-file", scert, "--tls-key-file", skey, "--tls-ca-cert-file", ca.file, "--tls-auth-clients", "yes")
	cfgFile := writeFile(t, dir, "edge.yaml", peerDomain)
	args := []string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--config", cfgFile, "--log-format", "json", "--redis", "rediss://" + tlsAddr, "--redis-timeout", "2s"}

	// Without the client certificate Redis refuses the connection.
	var out, errb syncBuffer
	code := run(context.Background(), append(append([]string{"serve"}, args...), "--redis-ca", ca.file), &out, &errb, noenv)
	if code != exitError {
		t.Errorf("no client certificate: exit %d, want %d:\n%s", code, exitError, errb.String())
	}
	s := startServe(t, map[string]string{"RATEWARDEN_REDIS_CA": ca.file, "RATEWARDEN_REDIS_CERT": ccert, "RATEWARDEN_REDIS_KEY": ckey}, args...)
	if !strings.Contains(s.logs.String(), `"msg":"deciding on Redis"`) {
		t.Fatalf("not on Redis:\n%s", s.logs.String())
	}
	got := decisions(t, dialPlain(t, s.grpc))
	if got[0].GetStatuses()[0].GetLimitRemaining() != 2 || got[3].GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("decisions on Redis over TLS: %v", got)
	}
	for _, r := range got {
		for _, st := range r.GetStatuses() {
			if st.GetCode() == rlspb.RateLimitResponse_UNKNOWN {
				t.Errorf("an unknown status: %v", r)
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
