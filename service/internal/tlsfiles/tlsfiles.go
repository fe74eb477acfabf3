// Package tlsfiles reads the service's TLS configurations from PEM files,
// the one place it does: a server's certificate and key, read again when
// they change, with client certificates required when a client CA is
// given (Server); and what a client trusts and presents (Client), for
// Redis and the xDS management server.
//
// Errors wrap ratewarden.ErrInvalidConfig and name the file at fault. Of
// the project it imports the root package only.
package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden"
)

// Server names the files of a server's TLS configuration.
type Server struct {
	// CertFile and KeyFile hold the server's certificate chain and key
	// (PEM). Both are required.
	CertFile, KeyFile string
	// ClientCAFile, when set, turns on mutual TLS: a client must present
	// a certificate that these CAs (PEM) signed.
	ClientCAFile string
	// ClientSAN, with ClientCAFile, also requires the client
	// certificate to name it (a DNS name, URI, IP address or email
	// address among its subject alternative names), as
	// envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN.
	ClientSAN string
}

// certCheckEvery is how often, at most, a handshake looks at the
// certificate files for a change.
var certCheckEvery = time.Second

// Given reports whether f names a file: a server given one serves TLS.
func (f Server) Given() bool { return f.CertFile != "" || f.KeyFile != "" || f.ClientCAFile != "" }

// Config returns a TLS configuration for servers that reads the
// certificate and key again when their files change: a handshake looks
// at the files at most once a second, and a certificate rotated on disk
// is served from the next handshake after that, without a restart.
// A pair that does not load (half written, say) keeps the one in force,
// logged on log. The files must load now. The client CA is read once.
func (f Server) Config(log *slog.Logger) (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, fmt.Errorf("tlsfiles: a certificate and a key file are both needed: %w", ratewarden.ErrInvalidConfig)
	}
	if log == nil {
		log = slog.Default()
	}
	r := &certReloader{files: f, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tlsfiles: client CA: %v: %w", err, ratewarden.ErrInvalidConfig)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tlsfiles: client CA %s: no PEM certificate: %w", f.ClientCAFile, ratewarden.ErrInvalidConfig)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		if san := f.ClientSAN; san != "" {
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !certNames(cs.PeerCertificates[0], san) {
					return errors.New("tlsfiles: the client certificate does not name " + san)
				}
				return nil
			}
		}
	}
	return cfg, nil
}

// certNames reports whether c names san among its subject alternative
// names.
func certNames(c *x509.Certificate, san string) bool {
	if slices.Contains(c.DNSNames, san) || slices.Contains(c.EmailAddresses, san) {
		return true
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	for _, ip := range c.IPAddresses {
		if ip.String() == san {
			return true
		}
	}
	return false
}

type certReloader struct {
	files Server
	log   *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	certPEM []byte
	keyPEM  []byte
	checked time.Time
}

// load reads the pair; unchanged contents keep the parsed certificate.
func (r *certReloader) load() error {
	c, err := os.ReadFile(r.files.CertFile)
	if err != nil {
		return fmt.Errorf("tlsfiles: certificate: %v: %w", err, ratewarden.ErrInvalidConfig)
	}
	k, err := os.ReadFile(r.files.KeyFile)
	if err != nil {
		return fmt.Errorf("tlsfiles: key: %v: %w", err, ratewarden.ErrInvalidConfig)
	}
	if r.cert != nil && bytes.Equal(c, r.certPEM) && bytes.Equal(k, r.keyPEM) {
		return nil
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		return fmt.Errorf("tlsfiles: %s, %s: %v: %w", r.files.CertFile, r.files.KeyFile, err, ratewarden.ErrInvalidConfig)
	}
	if r.cert != nil {
		r.log.Info("TLS certificate reloaded", "cert", r.files.CertFile)
	}
	r.cert, r.certPEM, r.keyPEM = &pair, c, k
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= certCheckEvery {
		r.checked = now
		if err := r.load(); err != nil {
			r.log.Error("TLS certificate files do not load; keeping the certificate in force", "err", err)
		}
	}
	return r.cert, nil
}

// Client names the files of a client's TLS configuration, beyond what
// its address says (a rediss:// URL, say).
type Client struct {
	// CAFile (PEM) replaces the system roots for the server's
	// certificate.
	CAFile string
	// CertFile and KeyFile (PEM) are a client certificate, for a server
	// that requires one.
	CertFile, KeyFile string
	// SkipHostname verifies the server's chain but not its name
	// (envoyproxy/ratelimit's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
	SkipHostname bool
}

// Given reports whether f sets anything.
func (f Client) Given() bool {
	return f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" || f.SkipHostname
}

// Apply puts f's files into tc, a client's TLS configuration.
func (f Client) Apply(tc *tls.Config) error {
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return fmt.Errorf("tlsfiles: CA: %v: %w", err, ratewarden.ErrInvalidConfig)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("tlsfiles: CA %s: no PEM certificate: %w", f.CAFile, ratewarden.ErrInvalidConfig)
		}
		tc.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return fmt.Errorf("tlsfiles: client certificate: %v: %w", err, ratewarden.ErrInvalidConfig)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	if f.SkipHostname {
		roots := tc.RootCAs
		tc.InsecureSkipVerify = true
		tc.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs := make([]*x509.Certificate, len(raw))
			for i, b := range raw {
				c, err := x509.ParseCertificate(b)
				if err != nil {
					return err
				}
				certs[i] = c
			}
			if len(certs) == 0 {
				return errors.New("tlsfiles: no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return nil
}
