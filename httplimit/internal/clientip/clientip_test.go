package clientip

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseHop(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":              "192.0.2.1",
		"192.0.2.1:8080":         "192.0.2.1",
		"2001:db8::1":            "2001:db8::1",
		"[2001:db8::1]":          "2001:db8::1",
		"[2001:db8::1]:8080":     "2001:db8::1",
		"fe80::1%eth0":           "fe80::1", // zone dropped
		"[fe80::1%eth0]:80":      "fe80::1",
		"::ffff:192.0.2.1":       "192.0.2.1", // unmapped
		"[::ffff:192.0.2.1]:443": "192.0.2.1",
		"":                       "",
		"unknown":                "",
		"_hidden":                "",
		"[2001:db8::1":           "",
		"2001:db8::1]":           "",
		"192.0.2.1:":             "",
		"192.0.2.1:port":         "",
		"1.2.3.4.5":              "",
		"[192.0.2.1]:80":         "", // brackets hold IPv6 only
		strings.Repeat("1", 65):  "",
		"  192.0.2.1":            "", // the walk trims; ParseHop does not
		"[2001:db8::1]:8080:1":   "",
		"[2001:db8::1]:8080]":    "",
	} {
		a, ok := ParseHop(in)
		got := ""
		if ok {
			got = a.String()
		}
		if got != want || ok != (want != "") {
			t.Errorf("ParseHop(%q) = %v, %v; want %q", in, a, ok, want)
		}
	}
}

func TestParseForwardedFor(t *testing.T) {
	many := func(n int) string { return strings.Repeat("for=a, ", n-1) + "for=a" }
	for _, tc := range []struct {
		line string
		want []string // nil: not the grammar
	}{
		{`for=192.0.2.60;proto=http;by=203.0.113.43`, []string{"192.0.2.60"}},
		{`for=a, for=b`, []string{"a", "b"}},
		{`For="[2001:db8:cafe::17]:4711"`, []string{"[2001:db8:cafe::17]:4711"}},
		{`proto=https`, []string{""}},
		{`for=a;proto=https, by=b`, []string{"a", ""}},
		{`for="a\"b\\c"`, []string{`a"b\c`}},
		{`for="x, y"`, []string{"x, y"}},
		{`for=""`, []string{""}},
		{" \tfor=a ;by=b , for=c\t", []string{"a", "c"}},
		{many(maxForwardedHops), slices.Repeat([]string{"a"}, maxForwardedHops)},
		{many(maxForwardedHops + 1), nil},
		{``, nil},
		{`for=`, nil},
		{`for="abc`, nil},
		{`for="abc\`, nil},
		{`=x`, nil},
		{`for=a b`, nil},
		{`for=a,`, nil},
		{`for=a;`, nil},
		{`for=a;;by=b`, nil},
		{`f r=a`, nil},
		{`for=a"b"`, nil},
	} {
		got, ok := parseForwardedFor(tc.line)
		if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("parseForwardedFor(%q) = %q, %v; want %q", tc.line, got, ok, tc.want)
		}
	}
}

func TestLastElementStart(t *testing.T) {
	for in, want := range map[string]int{
		`for=a`:                0,
		`for=a, for=b`:         6,
		`for=a, for="b, c"`:    6,
		`for="a, b"`:           0,
		`for="a\", b"`:         0, // the comma is inside the quotes
		`for=a,for="\"",for=b`: 15,
		`,`:                    1,
		``:                     0,
	} {
		if got := lastElementStart(in); got != want {
			t.Errorf("lastElementStart(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestWalk(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	peer := netip.MustParseAddr("10.0.0.1")
	hops := func(n int, hop string) string { return strings.Repeat(hop+", ", n-1) + hop }
	for _, tc := range []struct {
		name      string
		lines     []string
		forwarded bool
		want      string
	}{
		{"no lines", nil, false, "10.0.0.1"},
		{"one hop", []string{"203.0.113.9"}, false, "203.0.113.9"},
		{"right-most untrusted", []string{"1.2.3.4, 203.0.113.9, 10.0.0.2"}, false, "203.0.113.9"},
		{"several lines", []string{"1.2.3.4", "203.0.113.9, 10.0.0.2"}, false, "203.0.113.9"},
		{"client in an earlier line", []string{"1.2.3.4, 203.0.113.9", "10.0.0.2", "fd00::7"}, false, "203.0.113.9"},
		{"all trusted: left-most", []string{"10.0.0.3", "10.0.0.2"}, false, "10.0.0.3"},
		{"empty hops skipped", []string{" , 203.0.113.9,, ,", ""}, false, "203.0.113.9"},
		{"only empty hops", []string{",,", " "}, false, "10.0.0.1"},
		{"malformed right of the client", []string{"203.0.113.9, nope"}, false, "10.0.0.1"},
		{"malformed left of the client", []string{"nope, 203.0.113.9"}, false, "203.0.113.9"},
		{"malformed in an earlier line, never reached", []string{"nope", "203.0.113.9"}, false, "203.0.113.9"},
		{"malformed line after all-trusted", []string{"nope", "10.0.0.2"}, false, "10.0.0.1"},
		{"long trusted list", []string{"203.0.113.9, " + hops(1000, "10.0.0.2")}, false, "203.0.113.9"},

		{"Forwarded", []string{`for=192.0.2.60;proto=http, For="[2001:db8:cafe::17]:4711"`}, true, "2001:db8:cafe::17"},
		{"Forwarded chain", []string{`for=1.2.3.4, for=203.0.113.9;proto=https`, `for=10.0.0.7`}, true, "203.0.113.9"},
		{"Forwarded junk left of the client", []string{`x y z, for="garbage, for=203.0.113.9`}, true, "203.0.113.9"},
		{"Forwarded without for", []string{`proto=https`}, true, "10.0.0.1"},
		{"Forwarded obfuscated", []string{`for=_hidden`}, true, "10.0.0.1"},
		{"Forwarded two fors in quotes", []string{`for="1.2.3.4, 203.0.113.9"`}, true, "10.0.0.1"},
		{"Forwarded read as a list", []string{`for=203.0.113.9`}, false, "10.0.0.1"},
		{"a list read as Forwarded", []string{`203.0.113.9`}, true, "10.0.0.1"},
		{"Forwarded: 64 trusted elements", []string{hops(maxForwardedHops, "for=10.0.0.2")}, true, "10.0.0.2"},
		{"Forwarded: 65 trusted elements", []string{hops(maxForwardedHops+1, "for=10.0.0.2")}, true, "10.0.0.1"},
	} {
		if got := Walk(peer, tc.lines, tc.forwarded, trusted); got.String() != tc.want {
			t.Errorf("%s: Walk(%q, forwarded %v) = %v, want %s", tc.name, tc.lines, tc.forwarded, got, tc.want)
		}
	}
}

// FuzzForwardedFor: parseForwardedFor never panics, returns at most
// maxForwardedHops values, and reads back the values it returned when
// they are written again as quoted-strings; Walk on the line returns the
// peer or an address as ParseHop makes them.
func FuzzForwardedFor(f *testing.F) {
	for _, s := range []string{
		`for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"`,
		`for="\"`, `for=unknown, for=_x`, `;;,=`, `for="a\\", for=b`, `for="x,y", for=10.0.0.9`, "",
	} {
		f.Add(s)
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	peer := netip.MustParseAddr("10.0.0.1")
	f.Fuzz(func(t *testing.T, line string) {
		if a := Walk(peer, []string{line}, true, trusted); a != peer && (!a.IsValid() || a.Zone() != "" || a.Is4In6()) {
			t.Fatalf("Walk(%q) = %v: neither the peer nor an unmapped address without zone", line, a)
		}
		fors, ok := parseForwardedFor(line)
		if !ok {
			return
		}
		if len(fors) == 0 || len(fors) > maxForwardedHops {
			t.Fatalf("parseForwardedFor(%q): %d values", line, len(fors))
		}
		var b strings.Builder
		for i, v := range fors {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(`for="`)
			for j := 0; j < len(v); j++ {
				if v[j] == '"' || v[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(v[j])
			}
			b.WriteByte('"')
		}
		again, ok := parseForwardedFor(b.String())
		if !ok || !slices.Equal(again, fors) {
			t.Fatalf("parseForwardedFor(%q) = %q; written again as %q it reads %q, %v", line, fors, b.String(), again, ok)
		}
	})
}
