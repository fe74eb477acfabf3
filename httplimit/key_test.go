package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

var proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}

func keyOf(t *testing.T, cfg httplimit.IPConfig, remote string, hdr http.Header) (string, error) {
	t.Helper()
	fn, err := httplimit.ClientIP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for k, vs := range hdr {
		r.Header[k] = vs
	}
	return fn(r)
}

func xff(v ...string) http.Header { return http.Header{"X-Forwarded-For": v} }

func TestClientIPSpoofing(t *testing.T) {
	trusted := httplimit.IPConfig{TrustedProxies: proxies}
	cases := []struct {
		name   string
		cfg    httplimit.IPConfig
		remote string
		hdr    http.Header
		want   string
	}{
		// The attack: a client sets the header itself.
		{"untrusted peer, no proxies configured", httplimit.IPConfig{}, "198.51.100.7:1234", xff("1.2.3.4"), "ip:198.51.100.7"},
		{"untrusted peer, proxies configured", trusted, "198.51.100.7:1234", xff("1.2.3.4"), "ip:198.51.100.7"},
		{"untrusted peer sends X-Real-IP", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.XRealIP}, "198.51.100.7:1", http.Header{"X-Real-Ip": {"1.2.3.4"}}, "ip:198.51.100.7"},
		{"untrusted peer sends Forwarded", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "198.51.100.7:1", http.Header{"Forwarded": {"for=1.2.3.4"}}, "ip:198.51.100.7"},

		// Through trusted proxies: the right-most untrusted hop.
		{"one proxy", trusted, "10.0.0.1:80", xff("203.0.113.9"), "ip:203.0.113.9"},
		{"spoofed left part ignored", trusted, "10.0.0.1:80", xff("1.2.3.4, 203.0.113.9"), "ip:203.0.113.9"},
		{"proxy chain", trusted, "10.0.0.1:80", xff("1.2.3.4, 203.0.113.9, 10.0.0.2, 10.9.9.9"), "ip:203.0.113.9"},
		{"several header lines", trusted, "10.0.0.1:80", xff("1.2.3.4", "203.0.113.9, 10.0.0.2"), "ip:203.0.113.9"},
		{"several lines, client in the first", trusted, "10.0.0.1:80", xff("1.2.3.4, 203.0.113.9", "10.0.0.2"), "ip:203.0.113.9"},
		{"all hops trusted: left-most", trusted, "10.0.0.1:80", xff("10.0.0.3, 10.0.0.2"), "ip:10.0.0.3"},
		{"trusted peer without header", trusted, "10.0.0.1:80", nil, "ip:10.0.0.1"},
		{"hop with port", trusted, "10.0.0.1:80", xff("203.0.113.9:5555"), "ip:203.0.113.9"},
		{"bracketed IPv6 with port", trusted, "10.0.0.1:80", xff("[2001:db8:a:b:c::1]:443"), "ip:2001:db8:a:b::/64"},
		{"bracketed IPv6", trusted, "10.0.0.1:80", xff("[2001:db8::1]"), "ip:2001:db8::/64"},
		{"IPv6 proxy", trusted, "[fd00::1]:80", xff("203.0.113.9"), "ip:203.0.113.9"},
		{"mapped IPv4 hop", trusted, "10.0.0.1:80", xff("::ffff:203.0.113.9"), "ip:203.0.113.9"},
		{"X-Forwarded-For ignores Forwarded", trusted, "10.0.0.1:80", http.Header{"Forwarded": {"for=1.2.3.4"}, "X-Forwarded-For": {"203.0.113.9"}}, "ip:203.0.113.9"},
		{"X-Real-IP", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.XRealIP}, "10.0.0.1:80", http.Header{"X-Real-Ip": {"203.0.113.9"}, "X-Forwarded-For": {"1.2.3.4"}}, "ip:203.0.113.9"},
		{"Forwarded", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711"`}}, "ip:2001:db8:cafe::/64"},
		{"Forwarded chain", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for=1.2.3.4, for=203.0.113.9;proto=https`, `for=10.0.0.7`}}, "ip:203.0.113.9"},
		{"Forwarded ignores X-Forwarded-For", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80",
			http.Header{"Forwarded": {"for=203.0.113.9"}, "X-Forwarded-For": {"1.2.3.4"}}, "ip:203.0.113.9"},

		// Malformed headers fall back to the peer's address.
		{"garbage", trusted, "10.0.0.1:80", xff("garbage"), "ip:10.0.0.1"},
		{"garbage right of client", trusted, "10.0.0.1:80", xff("203.0.113.9, not-an-ip"), "ip:10.0.0.1"},
		{"garbage left of client is never reached", trusted, "10.0.0.1:80", xff("not-an-ip, 203.0.113.9"), "ip:203.0.113.9"},
		{"unknown", trusted, "10.0.0.1:80", xff("unknown"), "ip:10.0.0.1"},
		{"empty", trusted, "10.0.0.1:80", xff(""), "ip:10.0.0.1"},
		{"only commas", trusted, "10.0.0.1:80", xff(",,, ,"), "ip:10.0.0.1"},
		{"empty hops skipped", trusted, "10.0.0.1:80", xff("203.0.113.9,, ,"), "ip:203.0.113.9"},
		{"huge", trusted, "10.0.0.1:80", xff(strings.Repeat("1", 100000)), "ip:10.0.0.1"},
		{"zone", trusted, "10.0.0.1:80", xff("fe80::1%eth0"), "ip:fe80::/64"},
		{"bad brackets", trusted, "10.0.0.1:80", xff("[203.0.113.9"), "ip:10.0.0.1"},
		{"Forwarded unknown", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80", http.Header{"Forwarded": {"for=unknown"}}, "ip:10.0.0.1"},
		{"Forwarded obfuscated", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80", http.Header{"Forwarded": {"for=_hidden"}}, "ip:10.0.0.1"},
		{"Forwarded without for", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80", http.Header{"Forwarded": {"proto=https"}}, "ip:10.0.0.1"},
		{"Forwarded unterminated quote", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80", http.Header{"Forwarded": {`for="203.0.113.9`}}, "ip:10.0.0.1"},
		{"Forwarded comma in quotes", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80", http.Header{"Forwarded": {`for="1.2.3.4, 203.0.113.9"`}}, "ip:10.0.0.1"},
		// A client's malformed element left of what our proxy appended
		// cannot move the client onto the proxy's key.
		{"Forwarded client junk before proxy hop", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for="garbage, for=203.0.113.9`}}, "ip:203.0.113.9"},
		{"Forwarded client junk element before proxy hop", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80",
			http.Header{"Forwarded": {`x y z, for=203.0.113.9;proto=https`}}, "ip:203.0.113.9"},
		{"Forwarded no value", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80", http.Header{"Forwarded": {"for="}}, "ip:10.0.0.1"},
		{"Forwarded trailing junk", httplimit.IPConfig{TrustedProxies: proxies, Header: httplimit.Forwarded}, "10.0.0.1:80", http.Header{"Forwarded": {"for=203.0.113.9 x"}}, "ip:10.0.0.1"},

		// Remote address forms and grouping.
		{"remote without port", httplimit.IPConfig{}, "198.51.100.7", nil, "ip:198.51.100.7"},
		{"mapped remote", httplimit.IPConfig{}, "[::ffff:198.51.100.7]:1", nil, "ip:198.51.100.7"},
		{"mapped remote is trusted", trusted, "[::ffff:10.0.0.1]:1", xff("203.0.113.9"), "ip:203.0.113.9"},
		{"IPv6 /64 by default", httplimit.IPConfig{}, "[2001:db8:1:2:3:4:5:6]:443", nil, "ip:2001:db8:1:2::/64"},
		{"IPv6 /128", httplimit.IPConfig{IPv6Prefix: 128}, "[2001:db8:1:2:3:4:5:6]:443", nil, "ip:2001:db8:1:2:3:4:5:6"},
		{"IPv6 /48", httplimit.IPConfig{IPv6Prefix: 48}, "[2001:db8:1:2:3:4:5:6]:443", nil, "ip:2001:db8:1::/48"},
		{"IPv4 /24", httplimit.IPConfig{IPv4Prefix: 24}, "198.51.100.7:1", nil, "ip:198.51.100.0/24"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := keyOf(t, tc.cfg, tc.remote, tc.hdr)
			if err != nil || got != tc.want {
				t.Errorf("key = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// Through the middleware: a client from an untrusted address that changes
// X-Forwarded-For on every request still spends one budget.
func TestSpoofedHeaderDoesNotBypassTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		key, err := httplimit.ClientIP(httplimit.IPConfig{TrustedProxies: proxies})
		if err != nil {
			t.Fatal(err)
		}
		h := mustNew(t, l, httplimit.WithLimits(fixed(3, time.Minute)), httplimit.WithKey(key)).Handler(new(ok))
		spoof := []string{"1.2.3.4", "5.6.7.8", "10.0.0.5", "9.9.9.9", "2001:db8::1"}
		var codes []int
		for _, ip := range spoof {
			codes = append(codes, get(h, "198.51.100.7:1234", "/", func(r *http.Request) { r.Header.Set("X-Forwarded-For", ip) }).Code)
		}
		if want := []int{200, 200, 200, 429, 429}; !equalInts(codes, want) {
			t.Errorf("codes %v, want %v", codes, want)
		}
		// Through a trusted proxy, two real clients get a budget each.
		for _, c := range []string{"203.0.113.1", "203.0.113.2"} {
			w := get(h, "10.0.0.1:80", "/", func(r *http.Request) { r.Header.Set("X-Forwarded-For", "1.1.1.1, "+c) })
			if w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "2" {
				t.Errorf("client %s via proxy: %d remaining %q", c, w.Code, w.Header().Get("X-RateLimit-Remaining"))
			}
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestClientIPErrors(t *testing.T) {
	for _, remote := range []string{"", "@", "/run/app.sock", "not-an-ip:80"} {
		_, err := keyOf(t, httplimit.IPConfig{}, remote, nil)
		if !errors.Is(err, ratewarden.ErrInvalidKey) {
			t.Errorf("RemoteAddr %q: err %v, want ErrInvalidKey", remote, err)
		}
	}
	bad := []struct {
		cfg   httplimit.IPConfig
		field string
	}{
		{httplimit.IPConfig{IPv6Prefix: 129}, "IPv6Prefix"},
		{httplimit.IPConfig{IPv6Prefix: -1}, "IPv6Prefix"},
		{httplimit.IPConfig{IPv4Prefix: 33}, "IPv4Prefix"},
		{httplimit.IPConfig{Header: 7}, "Header"},
		{httplimit.IPConfig{TrustedProxies: []netip.Prefix{proxies[0], {}}}, "TrustedProxies[1]"},
	}
	for _, b := range bad {
		fn, err := httplimit.ClientIP(b.cfg)
		if fn != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "IPConfig."+b.field) || !strings.HasPrefix(err.Error(), "httplimit: ") {
			t.Errorf("%+v: %v", b.cfg, err)
		}
	}
}

func TestHeaderKey(t *testing.T) {
	fn := httplimit.Header("x-api-key")
	req := func(v string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if v != "" {
			r.Header.Set("X-Api-Key", v)
		}
		return r
	}
	a1, err1 := fn(req("secret-alice"))
	a2, err2 := fn(req("secret-alice"))
	b, err3 := fn(req("secret-bob"))
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatal(err1, err2, err3)
	}
	if a1 != a2 || a1 == b || !strings.HasPrefix(a1, "hdr:X-Api-Key:") || len(a1) != len("hdr:X-Api-Key:")+32 {
		t.Errorf("keys %q %q %q", a1, a2, b)
	}
	if strings.Contains(a1, "secret") {
		t.Errorf("key %q contains the secret", a1)
	}
	if _, err := fn(req("")); !errors.Is(err, ratewarden.ErrInvalidKey) || !strings.Contains(err.Error(), "X-Api-Key") {
		t.Errorf("missing header: %v", err)
	}
}

func TestFirstOfAndJoin(t *testing.T) {
	ipKey, err := httplimit.ClientIP(httplimit.IPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	fn := httplimit.FirstOf(httplimit.Header("X-API-Key"), ipKey)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = client
	if k, err := fn(r); err != nil || k != "ip:198.51.100.7" {
		t.Errorf("without API key: %q %v", k, err)
	}
	r.Header.Set("X-API-Key", "k")
	if k, err := fn(r); err != nil || !strings.HasPrefix(k, "hdr:") {
		t.Errorf("with API key: %q %v", k, err)
	}
	// Other errors stop FirstOf.
	boom := errors.New("boom")
	fail := func(*http.Request) (string, error) { return "", boom }
	if _, err := httplimit.FirstOf(fail, ipKey)(r); !errors.Is(err, boom) {
		t.Errorf("FirstOf error: %v", err)
	}
	if _, err := httplimit.FirstOf()(r); !errors.Is(err, ratewarden.ErrInvalidKey) {
		t.Errorf("empty FirstOf: %v", err)
	}

	// Join escapes its parts: different part lists never collide.
	j1, _ := httplimit.Join(httplimit.Static("a|b"), httplimit.Static("c"))(r)
	j2, _ := httplimit.Join(httplimit.Static("a"), httplimit.Static("b|c"))(r)
	j3, _ := httplimit.Join(httplimit.Static(`a\`), httplimit.Static("|c"))(r)
	if j1 == j2 || j1 == j3 || j2 == j3 {
		t.Errorf("Join collides: %q %q %q", j1, j2, j3)
	}
	if _, err := httplimit.Join(ipKey, fail)(r); !errors.Is(err, boom) {
		t.Errorf("Join error: %v", err)
	}
}

// Pattern is the per-route part of a composite key: the middleware wraps
// a route's handler inside a ServeMux.
func TestPatternAndCompositeKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		ipKey, _ := httplimit.ClientIP(httplimit.IPConfig{})
		var keys []string
		m := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Minute)),
			httplimit.WithKey(httplimit.Join(httplimit.Pattern, ipKey)),
			httplimit.WithOnLimit(func(_ *http.Request, i httplimit.Info) { keys = append(keys, i.Key) }))
		mux := http.NewServeMux()
		mux.Handle("GET /items/{id}", m.Handler(new(ok)))
		mux.Handle("GET /users/{id}", m.Handler(new(ok)))
		codes := []int{
			get(mux, client, "/items/1", nil).Code,
			get(mux, client, "/items/2", nil).Code, // same route: one budget
			get(mux, client, "/users/1", nil).Code, // another route: its own
			get(mux, "198.51.100.8:1", "/items/3", nil).Code,
		}
		if want := []int{200, 429, 200, 200}; !equalInts(codes, want) {
			t.Errorf("codes %v, want %v", codes, want)
		}
		if len(keys) != 1 || keys[0] != "default|route:GET /items/{id}|ip:198.51.100.7" {
			t.Errorf("keys %q", keys)
		}
		// Wrapping the mux instead: no pattern yet, a 400 that says nothing internal.
		outer := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Minute)), httplimit.WithKey(httplimit.Pattern)).Handler(mux)
		if w := get(outer, client, "/items/1", nil); w.Code != http.StatusBadRequest {
			t.Errorf("pattern outside the mux: %d", w.Code)
		}
	})
}

func TestForwardHeaderString(t *testing.T) {
	for h, want := range map[httplimit.ForwardHeader]string{httplimit.XForwardedFor: "X-Forwarded-For", httplimit.Forwarded: "Forwarded", httplimit.XRealIP: "X-Real-IP", 9: "ForwardHeader(9)"} {
		if h.String() != want {
			t.Errorf("%d: %q", h, h.String())
		}
	}
}
