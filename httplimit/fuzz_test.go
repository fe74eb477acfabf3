package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// FuzzClientIP feeds arbitrary peers and forwarding headers to ClientIP.
// It must never panic; a request whose peer is an IP address always gets
// a well-formed "ip:" key; an untrusted peer is always keyed by itself; and
// a forwarded address is never a trusted proxy unless the peer's is too.
func FuzzClientIP(f *testing.F) {
	seeds := []struct {
		remote, value string
		header        uint8
	}{
		{"10.0.0.1:80", "1.2.3.4, 203.0.113.9", 0},
		{"10.0.0.1:80", "203.0.113.9, garbage", 0},
		{"10.0.0.1:80", ",,,", 0},
		{"10.0.0.1:80", "[2001:db8::1]:443", 0},
		{"10.0.0.1:80", "fe80::1%eth0", 0},
		{"198.51.100.7:1", "1.2.3.4", 0},
		{"10.0.0.1:80", `for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"`, 1},
		{"10.0.0.1:80", `for="\"`, 1},
		{"10.0.0.1:80", `for=unknown, for=_x`, 1},
		{"10.0.0.1:80", `;;,=`, 1},
		{"10.0.0.1:80", "203.0.113.9", 2},
		{"[fd00::1]:80", "::ffff:1.2.3.4", 2},
		{"@", "1.2.3.4", 0},
		{"", "", 1},
	}
	for _, s := range seeds {
		f.Add(s.remote, s.value, s.header)
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	f.Fuzz(func(t *testing.T, remote, value string, header uint8) {
		cfg := httplimit.IPConfig{TrustedProxies: trusted, Header: httplimit.ForwardHeader(header % 3)}
		withProxies, err := httplimit.ClientIP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		noProxies, err := httplimit.ClientIP(httplimit.IPConfig{Header: cfg.Header})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		r.Header[http.CanonicalHeaderKey(cfg.Header.String())] = []string{value}

		k1, err1 := withProxies(r)
		k2, err2 := noProxies(r)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("errors differ with and without proxies: %v / %v", err1, err2)
		}
		if err1 != nil {
			if !errors.Is(err1, ratewarden.ErrInvalidKey) {
				t.Fatalf("error %v does not wrap ErrInvalidKey", err1)
			}
			return
		}
		_, ok1 := parseKey(k1)
		a2, ok2 := parseKey(k2)
		if !ok1 || !ok2 {
			t.Fatalf("malformed keys %q %q", k1, k2)
		}
		peerTrusted := false
		for _, p := range trusted {
			peerTrusted = peerTrusted || p.Contains(a2)
		}
		if !peerTrusted && k1 != k2 {
			t.Fatalf("untrusted peer %q keyed %q, want its own %q", remote, k1, k2)
		}
		if !peerTrusted {
			return
		}
		// Whatever the client wrote, the hop a trusted proxy appends (a
		// header line of its own, walked first) decides the key.
		appended := "203.0.113.77"
		if cfg.Header == httplimit.Forwarded {
			appended = "for=" + appended
		}
		r.Header[http.CanonicalHeaderKey(cfg.Header.String())] = []string{value, appended}
		if k, err := withProxies(r); err != nil || k != "ip:203.0.113.77" {
			t.Fatalf("after a trusted proxy appended 203.0.113.77 to %q: key %q, %v", value, k, err)
		}
	})
}

// parseKey reads back an "ip:" key: an address or a prefix.
func parseKey(k string) (netip.Addr, bool) {
	s, ok := strings.CutPrefix(k, "ip:")
	if !ok {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a, true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || p != p.Masked() {
		return netip.Addr{}, false
	}
	return p.Addr(), true
}
