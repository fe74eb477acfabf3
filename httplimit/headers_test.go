package httplimit_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

func fieldsString(fs []httplimit.Field) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.Name + ": " + f.Value + "\n")
	}
	return b.String()
}

func TestRendererFields(t *testing.T) {
	perMin, perDay := fixed(100, time.Minute), fixed(1000, 24*time.Hour)
	r := httplimit.NewRenderer(httplimit.DraftHeaders|httplimit.XRateLimitHeaders|httplimit.XRateLimitResetDelta,
		httplimit.Policy{Name: "burst", Limit: perMin}, httplimit.Policy{Limit: perDay})
	denied := ratewarden.Decision{Results: []ratewarden.Result{
		{Allowed: false, Limit: perMin, Remaining: 0, RetryAfter: 1500 * time.Millisecond, ResetAfter: 59 * time.Second},
		{Allowed: true, Limit: perDay, Remaining: 400, ResetAfter: 3 * time.Hour},
	}}
	// The denying policy's t is its retry time, as Retry-After (rounded
	// up); on a rejection no t exceeds Retry-After (draft section 6).
	// X-RateLimit-Reset of a denying binding policy is when Retry-After
	// ends, not the full reset (59 s): a client waiting for it with
	// Remaining 0 retries when it can be admitted.
	want := `Ratelimit-Policy: "burst";q=100;w=60, "1000/1d fixed_window";q=1000;w=86400
Ratelimit: "burst";r=0;t=2, "1000/1d fixed_window";r=400;t=2
X-Ratelimit-Limit: 100
X-Ratelimit-Remaining: 0
X-Ratelimit-Reset: 2
Retry-After: 2
`
	if got := fieldsString(r.Append(nil, denied, true)); got != want {
		t.Errorf("rejected:\n%s\nwant:\n%s", got, want)
	}
	// Over the limit but passed (shadow mode): no Retry-After, and the
	// other policy's t is its own.
	wantShadow := strings.Replace(strings.TrimSuffix(want, "Retry-After: 2\n"), "r=400;t=2", "r=400;t=10800", 1)
	if got := fieldsString(r.Append(nil, denied, false)); got != wantShadow {
		t.Errorf("not rejected:\n%s\nwant:\n%s", got, wantShadow)
	}
	// Set writes what Append lists.
	h := http.Header{"Retry-After": {"old"}, "Other": {"kept"}}
	r.Set(h, denied, true)
	for _, f := range r.Append(nil, denied, true) {
		if got := h.Values(f.Name); len(got) != 1 || got[0] != f.Value {
			t.Errorf("Set: %s = %q, want %q", f.Name, got, f.Value)
		}
	}
	if len(h) != 7 || h.Get("Other") != "kept" {
		t.Errorf("Set left %v", h)
	}
	// No results: nothing, not even Retry-After.
	if got := r.Append(nil, ratewarden.Decision{}, true); len(got) != 0 {
		t.Errorf("no results: %v", got)
	}
	// A Retry-After is at least 1 s, and "0" is never sent.
	r1 := httplimit.NewRenderer(0, httplimit.Policy{Limit: perMin})
	got := r1.Append(nil, ratewarden.Decision{Results: []ratewarden.Result{{Limit: perMin}}}, true)
	if fieldsString(got) != "Retry-After: 1\n" {
		t.Errorf("set 0, rejected: %v", got)
	}
}

// TestRendererResetUnix: X-RateLimit-Reset is a Unix time by default
// (XRateLimitResetUnix, deprecated, changes nothing), rounded up so a
// client waiting until then is never early.
func TestRendererResetUnix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := fixed(5, time.Minute)
		d := ratewarden.Decision{Allowed: true, Results: []ratewarden.Result{{Allowed: true, Limit: lim, Remaining: 4, ResetAfter: 40*time.Second + time.Millisecond}}}
		time.Sleep(300 * time.Millisecond)                                   // now is not on a whole second
		want := strconv.FormatInt(time.Now().Add(41*time.Second).Unix(), 10) // ceil(now + 40.001 s)
		for _, set := range []httplimit.HeaderSet{httplimit.XRateLimitHeaders, httplimit.XRateLimitHeaders | httplimit.XRateLimitResetUnix} {
			r := httplimit.NewRenderer(set, httplimit.Policy{Limit: lim})
			if got := header(r.Append(nil, d, false), "X-Ratelimit-Reset"); got != want {
				t.Errorf("set %#x: X-RateLimit-Reset = %s, want %s (now + 40.001 s, rounded up)", set, got, want)
			}
		}
		r := httplimit.NewRenderer(httplimit.XRateLimitHeaders|httplimit.XRateLimitResetDelta, httplimit.Policy{Limit: lim})
		if got := header(r.Append(nil, d, false), "X-Ratelimit-Reset"); got != "41" {
			t.Errorf("XRateLimitResetDelta: X-RateLimit-Reset = %s, want 41", got)
		}
	})
}

func header(fs []httplimit.Field, name string) string {
	for _, f := range fs {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// TestRendererPartitionKey: pk is sent only when configured and given a
// key, is a Byte Sequence of a keyed hash (never the key), equal for
// equal keys and different for others and other secrets.
func TestRendererPartitionKey(t *testing.T) {
	lim := fixed(5, time.Minute)
	d := ratewarden.Decision{Allowed: true, Results: []ratewarden.Result{{Allowed: true, Limit: lim, Remaining: 4, ResetAfter: time.Minute}}}
	base := httplimit.NewRenderer(httplimit.DraftHeaders, httplimit.Policy{Name: "p", Limit: lim})
	if _, err := base.WithPartitionKey([]byte("short")); !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Errorf("short secret: %v, want ErrInvalidConfig", err)
	}
	secret := []byte("0123456789abcdef")
	r, err := base.WithPartitionKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	pk := func(r *httplimit.Renderer, key string) string {
		v := header(r.AppendKey(nil, d, false, key), "Ratelimit")
		_, p, _ := strings.Cut(v, ";pk=")
		return p
	}
	if got := header(base.AppendKey(nil, d, false, "default|ip:192.0.2.1"), "Ratelimit"); got != `"p";r=4;t=60` {
		t.Errorf("no secret: %s, want no pk", got)
	}
	if got := header(r.Append(nil, d, false), "Ratelimit"); got != `"p";r=4;t=60` {
		t.Errorf("Append (no key): %s, want no pk", got)
	}
	a := pk(r, "default|ip:192.0.2.1")
	if len(a) != 26 || a[0] != ':' || a[25] != ':' {
		t.Fatalf("pk %q: want :<24 base64 chars>:", a)
	}
	raw, err := base64.StdEncoding.DecodeString(a[1:25])
	if err != nil || len(raw) != 16 || strings.Contains(a, "192.0.2.1") {
		t.Errorf("pk %q: %d bytes, %v", a, len(raw), err)
	}
	other, _ := base.WithPartitionKey([]byte("fedcba9876543210"))
	if pk(r, "default|ip:192.0.2.1") != a || pk(r, "default|ip:192.0.2.2") == a || pk(other, "default|ip:192.0.2.1") == a {
		t.Error("pk is not a keyed function of the key")
	}
	h := http.Header{}
	r.SetKey(h, d, false, "default|ip:192.0.2.1")
	if got := h.Get("Ratelimit"); got != `"p";r=4;t=60;pk=`+a {
		t.Errorf("SetKey: %s", got)
	}
}

// TestRendererNames: policy names become Structured Field Strings: '"'
// and '\' escaped, bytes outside printable ASCII replaced by '?'.
func TestRendererNames(t *testing.T) {
	lim := fixed(1, time.Second)
	for name, want := range map[string]string{
		"plain":         `"plain"`,
		`we"ird\`:       `"we\"ird\\"`,
		"tab\there":     `"tab?here"`,
		"nul\x00":       `"nul?"`,
		"del\x7f":       `"del?"`,
		"café":          `"caf??"`, // two bytes of UTF-8
		" ~":            `" ~"`,    // 0x20 and 0x7E are printable
		"":              `"1/1s fixed_window"`,
		`\"`:            `"\\\""`,
		"path/a=b,c;d ": `"path/a=b,c;d "`,
	} {
		r := httplimit.NewRenderer(httplimit.DraftHeaders, httplimit.Policy{Name: name, Limit: lim})
		got := r.Append(nil, ratewarden.Decision{Results: []ratewarden.Result{{Limit: lim}}}, false)
		if pv := got[0].Value; pv != want+";q=1;w=1" {
			t.Errorf("name %q: RateLimit-Policy %s, want %s;q=1;w=1", name, pv, want)
		}
	}
}

// FuzzRendererName: whatever the name, the policy item is a well-formed
// Structured Field String: quoted, printable ASCII only, every backslash
// escaping '"' or '\'.
func FuzzRendererName(f *testing.F) {
	for _, s := range []string{"", "a", `"`, `\`, "\x00\xff", "é", `a\"b`} {
		f.Add(s)
	}
	lim := fixed(1, time.Second)
	f.Fuzz(func(t *testing.T, name string) {
		r := httplimit.NewRenderer(httplimit.DraftHeaders, httplimit.Policy{Name: name, Limit: lim})
		v := r.Append(nil, ratewarden.Decision{Results: []ratewarden.Result{{Limit: lim}}}, false)[0].Value
		s, ok := strings.CutSuffix(v, ";q=1;w=1")
		if !ok || len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
			t.Fatalf("name %q: %q is not a quoted item", name, v)
		}
		body := s[1 : len(s)-1]
		n := 0 // characters the string stands for
		for i := 0; i < len(body); i++ {
			c := body[i]
			switch {
			case c < 0x20 || c > 0x7e:
				t.Fatalf("name %q: byte %#x in %q", name, c, s)
			case c == '"':
				t.Fatalf("name %q: unescaped quote in %q", name, s)
			case c == '\\':
				if i+1 == len(body) || (body[i+1] != '"' && body[i+1] != '\\') {
					t.Fatalf("name %q: bad escape in %q", name, s)
				}
				i++
			}
			n++
		}
		if name != "" && n != len(name) {
			t.Fatalf("name %q (%d bytes): %q stands for %d characters", name, len(name), s, n)
		}
	})
}
