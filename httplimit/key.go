package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit/internal/clientip"
)

// A KeyFunc names the client a request counts against. It returns an error
// wrapping ratewarden.ErrInvalidKey when the request carries no usable
// identity (the middleware then answers 400 Bad Request by default; see
// WithErrorHandler). It must be safe for concurrent use.
type KeyFunc func(r *http.Request) (string, error)

// ForwardHeader selects the one forwarding header ClientIP reads from
// trusted proxies.
//
// Exactly one header is read, the one your proxies write: a proxy that
// maintains X-Forwarded-For passes a client-supplied Forwarded or X-Real-IP
// through untouched, so reading any header the proxy does not own would let
// a client choose its own key.
type ForwardHeader uint8

const (
	// XForwardedFor reads X-Forwarded-For: a comma-separated list of
	// addresses, each proxy appending the address it received the request
	// from. It is the default.
	XForwardedFor ForwardHeader = iota
	// Forwarded reads the "for" parameters of the RFC 7239 Forwarded header.
	Forwarded
	// XRealIP reads X-Real-IP: a single address set by the proxy in front
	// of this server.
	XRealIP

	numForwardHeaders
)

var forwardHeaderNames = [numForwardHeaders]string{"X-Forwarded-For", "Forwarded", "X-Real-IP"}

// String returns the header's canonical name.
func (h ForwardHeader) String() string {
	if h < numForwardHeaders {
		return forwardHeaderNames[h]
	}
	return fmt.Sprintf("ForwardHeader(%d)", uint8(h))
}

// IPConfig configures ClientIP. The zero IPConfig trusts no proxy: every
// request is keyed by the address of the TCP peer (http.Request.RemoteAddr),
// whatever headers it sends.
type IPConfig struct {
	// TrustedProxies are the networks of the proxies in front of this
	// server. The forwarding header is read only when the TCP peer is in
	// one of them, and then walked from the right, skipping every hop in
	// them: the client is the right-most hop that is not a trusted proxy.
	TrustedProxies []netip.Prefix
	// Header is the forwarding header the trusted proxies write; default
	// XForwardedFor.
	Header ForwardHeader
	// IPv4Prefix groups IPv4 clients by this many leading bits; 0 means 32
	// (one key per address).
	IPv4Prefix int
	// IPv6Prefix groups IPv6 clients by this many leading bits; 0 means 64.
	// A single IPv6 host usually controls at least a /64, so keying by the
	// full address would give it 2^64 budgets.
	IPv6Prefix int
}

func (c IPConfig) validate() (IPConfig, error) {
	if c.Header >= numForwardHeaders {
		return c, fmt.Errorf("httplimit: IPConfig.Header: unknown forwarding header %d: %w", c.Header, ratewarden.ErrInvalidConfig)
	}
	if c.IPv4Prefix == 0 {
		c.IPv4Prefix = 32
	}
	if c.IPv6Prefix == 0 {
		c.IPv6Prefix = 64
	}
	if c.IPv4Prefix < 1 || c.IPv4Prefix > 32 {
		return c, fmt.Errorf("httplimit: IPConfig.IPv4Prefix must be 1..32 (0 for 32), got %d: %w", c.IPv4Prefix, ratewarden.ErrInvalidConfig)
	}
	if c.IPv6Prefix < 1 || c.IPv6Prefix > 128 {
		return c, fmt.Errorf("httplimit: IPConfig.IPv6Prefix must be 1..128 (0 for 64), got %d: %w", c.IPv6Prefix, ratewarden.ErrInvalidConfig)
	}
	trusted := make([]netip.Prefix, len(c.TrustedProxies))
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			return c, fmt.Errorf("httplimit: IPConfig.TrustedProxies[%d] is not a valid prefix: %w", i, ratewarden.ErrInvalidConfig)
		}
		// Unmapped and masked, so Contains works for ::ffff:a.b.c.d peers too.
		a := p.Addr()
		bits := p.Bits()
		if a.Is4In6() && bits >= 96 {
			a, bits = a.Unmap(), bits-96
		}
		trusted[i] = netip.PrefixFrom(a.WithZone(""), bits).Masked()
	}
	c.TrustedProxies = trusted
	return c, nil
}

// ClientIP returns a KeyFunc that keys a request by its client's address,
// as "ip:<address>" or, when grouped, "ip:<network>/<bits>".
//
// The client is found like this: start from the TCP peer
// (http.Request.RemoteAddr). While the current hop is inside
// cfg.TrustedProxies, step one hop to the left in cfg.Header. The first
// hop that is not a trusted proxy is the client. When every hop is trusted
// (a request from inside your network), the left-most hop is the client.
// A forwarding header from an untrusted peer is ignored entirely, so a
// client cannot choose its key by sending one.
//
// Malformed header values never fail a request: when the walk meets a hop
// it cannot parse (garbage, "unknown", an obfuscated identifier) the key
// falls back to the TCP peer's address. Only a RemoteAddr that is not an IP
// address (for example a Unix socket) is an error, wrapping
// ratewarden.ErrInvalidKey.
//
// ClientIP returns an error wrapping ratewarden.ErrInvalidConfig that names
// the bad IPConfig field.
func ClientIP(cfg IPConfig) (KeyFunc, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return cfg.keyFunc(), nil
}

// keyFunc is ClientIP's KeyFunc for c, which validate returned.
func (c IPConfig) keyFunc() KeyFunc {
	return func(r *http.Request) (string, error) {
		a, ok := c.clientAddr(r)
		if !ok {
			return "", fmt.Errorf("httplimit: request has no IP peer address (RemoteAddr %q): %w", truncate(r.RemoteAddr, 64), ratewarden.ErrInvalidKey)
		}
		return c.keyOf(a), nil
	}
}

// keyOf formats a client address, grouped by the configured prefix.
func (c IPConfig) keyOf(a netip.Addr) string {
	bits := c.IPv4Prefix
	if a.Is6() {
		bits = c.IPv6Prefix
	}
	buf := make([]byte, 0, 48)
	buf = append(buf, "ip:"...)
	if bits == a.BitLen() {
		return string(a.AppendTo(buf))
	}
	p, _ := a.Prefix(bits) // bits is within 1..BitLen, validated
	return string(p.AppendTo(buf))
}

// clientAddr implements the walk documented on ClientIP. It reports false
// only when RemoteAddr is not an IP address.
func (c IPConfig) clientAddr(r *http.Request) (netip.Addr, bool) {
	peer, ok := clientip.ParseHop(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !clientip.Trusted(c.TrustedProxies, peer) {
		return peer, true
	}
	return clientip.Walk(peer, r.Header.Values(forwardHeaderNames[c.Header]), c.Header == Forwarded, c.TrustedProxies), true
}

// Header returns a KeyFunc that keys a request by the value of the named
// header, for example an API key: "hdr:<name>:<digest>", where digest is
// the first 16 bytes of the value's SHA-256 in hex. The value is hashed so
// that secrets do not appear in Redis keys, logs or metrics. A request
// without the header (or with an empty value) gets an error wrapping
// ratewarden.ErrInvalidKey; combine with FirstOf to fall back to another
// key instead.
func Header(name string) KeyFunc {
	canon := http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(canon)
		if v == "" {
			return "", fmt.Errorf("httplimit: request has no %s header: %w", canon, ratewarden.ErrInvalidKey)
		}
		sum := sha256.Sum256([]byte(v))
		return "hdr:" + canon + ":" + hex.EncodeToString(sum[:16]), nil
	}
}

// Static returns a KeyFunc that gives every request the key s: one budget
// shared by all clients (a global limit), or a fixed part of a Join.
func Static(s string) KeyFunc {
	return func(*http.Request) (string, error) { return s, nil }
}

// Pattern keys a request by the net/http ServeMux pattern that matched it
// (http.Request.Pattern, for example "GET /items/{id}"), so every item
// shares one budget. It errors with ratewarden.ErrInvalidKey when the
// pattern is empty, which is the case when the middleware wraps the
// ServeMux instead of the route's handler.
func Pattern(r *http.Request) (string, error) {
	if r.Pattern == "" {
		return "", fmt.Errorf("httplimit: request has no ServeMux pattern (wrap the route's handler, not the mux): %w", ratewarden.ErrInvalidKey)
	}
	return "route:" + r.Pattern, nil
}

// Join returns a KeyFunc whose key combines the keys of fns, for
// example Join(Pattern, clientIP) for "per route and client". Each part is
// escaped so that different part lists never join to the same key. The
// first error is returned.
func Join(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, fn := range fns {
			k, err := fn(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte('|')
			}
			writeEscaped(&b, k)
		}
		return b.String(), nil
	}
}

// FirstOf returns a KeyFunc that tries fns in order and returns the first
// key that does not fail with ratewarden.ErrInvalidKey; for example
// FirstOf(Header("X-API-Key"), clientIP) keys by API key when there is one
// and by address otherwise. Other errors are returned at once.
func FirstOf(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var err error
		for _, fn := range fns {
			var k string
			if k, err = fn(r); err == nil {
				return k, nil
			}
			if !isKeyError(err) {
				return "", err
			}
		}
		if err == nil {
			err = fmt.Errorf("httplimit: FirstOf has no key functions: %w", ratewarden.ErrInvalidKey)
		}
		return "", err
	}
}

// writeEscaped writes s with '\' and '|' escaped by '\'.
func writeEscaped(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' || s[i] == '|' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func isKeyError(err error) bool { return errors.Is(err, ratewarden.ErrInvalidKey) }
