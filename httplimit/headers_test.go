package httplimit_test

import (
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
	r := httplimit.NewRenderer(httplimit.DraftHeaders|httplimit.XRateLimitHeaders,
		httplimit.Policy{Name: "burst", Limit: perMin}, httplimit.Policy{Limit: perDay})
	denied := ratewarden.Decision{Results: []ratewarden.Result{
		{Allowed: false, Limit: perMin, Remaining: 0, RetryAfter: 1500 * time.Millisecond, ResetAfter: 59 * time.Second},
		{Allowed: true, Limit: perDay, Remaining: 400, ResetAfter: 3 * time.Hour},
	}}
	want := `Ratelimit-Policy: "burst";q=100;w=60, "1000/1d fixed_window";q=1000;w=86400
Ratelimit: "burst";r=0;t=59, "1000/1d fixed_window";r=400;t=10800
X-Ratelimit-Limit: 100
X-Ratelimit-Remaining: 0
X-Ratelimit-Reset: 59
Retry-After: 2
`
	if got := fieldsString(r.Append(nil, denied, true)); got != want {
		t.Errorf("rejected:\n%s\nwant:\n%s", got, want)
	}
	// Over the limit but passed (shadow mode): no Retry-After.
	if got := fieldsString(r.Append(nil, denied, false)); got != strings.TrimSuffix(want, "Retry-After: 2\n") {
		t.Errorf("not rejected:\n%s", got)
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

func TestRendererResetUnix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := fixed(5, time.Minute)
		r := httplimit.NewRenderer(httplimit.XRateLimitHeaders|httplimit.XRateLimitResetUnix, httplimit.Policy{Limit: lim})
		d := ratewarden.Decision{Allowed: true, Results: []ratewarden.Result{{Allowed: true, Limit: lim, Remaining: 4, ResetAfter: 40*time.Second + time.Millisecond}}}
		want := time.Now().Add(41 * time.Second).Unix()
		for _, f := range r.Append(nil, d, false) {
			if f.Name == "X-Ratelimit-Reset" && f.Value != strconv.FormatInt(want, 10) {
				t.Errorf("X-RateLimit-Reset = %s, want %d (now + 41 s)", f.Value, want)
			}
		}
	})
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
