package server

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

// TLSFiles names the files of a server's TLS configuration.
type TLSFiles struct {
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

// ReloadingTLS returns a TLS configuration for servers that reads the
// certificate and key again when their files change: a handshake looks
// at the files at most once a second, and a certificate rotated on disk
// is served from the next handshake after that, without a restart.
// A pair that does not load (half written, say) keeps the one in force,
// logged. The files must load now. The client CA is read once. Errors
// wrap ratewarden.ErrInvalidConfig.
func ReloadingTLS(f TLSFiles, log *slog.Logger) (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, fmt.Errorf("server: TLS: a certificate and a key file are both needed: %w", ratewarden.ErrInvalidConfig)
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
			return nil, fmt.Errorf("server: TLS client CA: %v: %w", err, ratewarden.ErrInvalidConfig)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server: TLS client CA %s: no PEM certificate: %w", f.ClientCAFile, ratewarden.ErrInvalidConfig)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		if san := f.ClientSAN; san != "" {
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !certNames(cs.PeerCertificates[0], san) {
					return errors.New("server: TLS: the client certificate does not name " + san)
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
	files TLSFiles
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
		return fmt.Errorf("server: TLS certificate: %v: %w", err, ratewarden.ErrInvalidConfig)
	}
	k, err := os.ReadFile(r.files.KeyFile)
	if err != nil {
		return fmt.Errorf("server: TLS key: %v: %w", err, ratewarden.ErrInvalidConfig)
	}
	if r.cert != nil && bytes.Equal(c, r.certPEM) && bytes.Equal(k, r.keyPEM) {
		return nil
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		return fmt.Errorf("server: TLS %s, %s: %v: %w", r.files.CertFile, r.files.KeyFile, err, ratewarden.ErrInvalidConfig)
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

// WithGRPCTLS serves gRPC over TLS with cfg (ReloadingTLS makes one);
// nil, the default, is plaintext.
func WithGRPCTLS(cfg *tls.Config) Option {
	return func(o *options) { o.grpcTLS = cfg }
}

// WithHTTPTLS serves the HTTP API, and the admin address when there is
// one, over TLS with cfg; nil, the default, is plaintext.
func WithHTTPTLS(cfg *tls.Config) Option {
	return func(o *options) { o.httpTLS = cfg }
}
