package httplimit_test

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// TestProxyWarnings: each forwarding misconfiguration is logged exactly
// once however many requests show it (also from concurrent requests),
// and counted every time; well-configured traffic neither logs nor counts.
func TestProxyWarnings(t *testing.T) {
	proxies := httplimit.IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	xff := func(r *http.Request) { r.Header.Set("X-Forwarded-For", "203.0.113.9") }
	realIP := func(r *http.Request) { r.Header.Set("X-Real-IP", "203.0.113.9") }
	cases := []struct {
		name   string
		opt    httplimit.Option
		remote string
		mod    func(*http.Request)
		want   httplimit.ProxyWarnings
		log    string // a part of the one Warn line; "" for none
	}{
		{"default, forwarded header", nil, client, xff, httplimit.ProxyWarnings{UntrustedForwardHeader: 20}, "no proxy is trusted"},
		{"no proxy trusted, X-Real-IP", httplimit.WithClientIP(httplimit.IPConfig{}), client, realIP, httplimit.ProxyWarnings{UntrustedForwardHeader: 20}, "header=X-Real-Ip"},
		{"no proxy trusted, no header", httplimit.WithClientIP(httplimit.IPConfig{}), client, nil, httplimit.ProxyWarnings{}, ""},
		{"trusted proxy, no header", httplimit.WithClientIP(proxies), "10.1.2.3:4000", nil, httplimit.ProxyWarnings{NoForwardHeader: 20}, "carries no X-Forwarded-For header"},
		{"trusted proxy, header", httplimit.WithClientIP(proxies), "10.1.2.3:4000", xff, httplimit.ProxyWarnings{}, ""},
		{"trusted proxies, untrusted peer without header", httplimit.WithClientIP(proxies), client, nil, httplimit.ProxyWarnings{}, ""},
		{"trusted proxy, the other header", httplimit.WithClientIP(proxies), "10.1.2.3:4000", realIP, httplimit.ProxyWarnings{NoForwardHeader: 20}, "carries no X-Forwarded-For header"},
		{"WithKey: no checks", httplimit.WithKey(httplimit.Header("X-Api-Key")), client, func(r *http.Request) { xff(r); r.Header.Set("X-Api-Key", "k") }, httplimit.ProxyWarnings{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logger, buf := newLogger()
			l, err := ratewarden.New(mustMemstore(t))
			if err != nil {
				t.Fatal(err)
			}
			opts := []httplimit.Option{httplimit.WithLimits(fixed(1000, time.Hour)), httplimit.WithLogger(logger)}
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			m := mustNew(t, l, opts...)
			h := m.Handler(new(ok))
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 5 {
						if w := get(h, tc.remote, "/", tc.mod); w.Code != http.StatusOK {
							t.Errorf("status %d", w.Code)
						}
					}
				})
			}
			wg.Wait()
			if got := m.ProxyWarnings(); got != tc.want {
				t.Errorf("ProxyWarnings = %+v, want %+v", got, tc.want)
			}
			lines := strings.Count(buf.String(), "level=WARN")
			switch {
			case tc.log == "" && lines != 0:
				t.Errorf("logged %d warnings, want none:\n%s", lines, buf)
			case tc.log != "" && (lines != 1 || !strings.Contains(buf.String(), tc.log)):
				t.Errorf("logged %d warnings, want exactly one containing %q:\n%s", lines, tc.log, buf)
			}
			if strings.Contains(buf.String(), "203.0.113.9") {
				t.Errorf("the warning names a client address:\n%s", buf)
			}
		})
	}
}

func TestWithClientIPValidates(t *testing.T) {
	l, err := ratewarden.New(mustMemstore(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = httplimit.New(l, httplimit.WithLimits(fixed(1, time.Second)), httplimit.WithClientIP(httplimit.IPConfig{IPv4Prefix: 40}))
	if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "IPv4Prefix") {
		t.Errorf("bad IPConfig: %v, want ErrInvalidConfig naming IPv4Prefix", err)
	}
	_, err = httplimit.New(l, httplimit.WithLimits(fixed(1, time.Second)), httplimit.WithPartitionKey([]byte("short")))
	if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "WithPartitionKey") {
		t.Errorf("short pk secret: %v, want ErrInvalidConfig naming WithPartitionKey", err)
	}
}
