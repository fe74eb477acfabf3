package redisurl

import (
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"os"

	"github.com/redis/rueidis"
)

// applyTLS reads the TLS parameters of a rediss:// URL: a CA to verify
// the servers with (instead of the system roots), a client certificate
// for servers that ask for one (tls-auth-clients), and the name to verify
// (rueidis uses one for every connection). Sentinel connections get the
// same settings (applySentinel clones them).
func applyTLS(opt *rueidis.ClientOption, q url.Values, _ bool) error {
	ca, cert, key, name := q.Get("tls_ca_file"), q.Get("tls_cert_file"), q.Get("tls_key_file"), q.Get("tls_server_name")
	if ca == "" && cert == "" && key == "" && name == "" {
		return nil
	}
	if opt.TLSConfig == nil {
		return urlErr("tls_* parameters need TLS (rediss:// or rediss-sentinel://)")
	}
	if (cert == "") != (key == "") {
		return urlErr("parameters tls_cert_file and tls_key_file go together")
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return urlErr("parameter tls_ca_file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return urlErr("parameter tls_ca_file: no PEM certificate in %s", ca)
		}
		opt.TLSConfig.RootCAs = pool
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return urlErr("parameters tls_cert_file and tls_key_file: %v", err)
		}
		opt.TLSConfig.Certificates = []tls.Certificate{pair}
	}
	if name != "" {
		opt.TLSConfig.ServerName = name
	}
	return nil
}
