// Package clientip finds a request's client address among the hops that
// forwarding headers record (X-Forwarded-For, X-Real-IP, RFC 7239
// Forwarded), for httplimit.ClientIP, whose doc comment states the rules.
// A malformed or hostile header ends the walk after bounded work.
package clientip

import (
	"net/netip"
	"strings"
)

// Trusted reports whether a is in one of proxies. The prefixes must be
// unmapped and masked (httplimit's IPConfig.validate makes them so), as
// ParseHop's addresses are.
func Trusted(proxies []netip.Prefix, a netip.Addr) bool {
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Walk returns the client of a request whose TCP peer, peer, is a trusted
// proxy. lines are the forwarding header's lines in order of arrival (the
// last one nearest to us), each a comma-separated list of addresses
// (X-Forwarded-For, X-Real-IP) or, when forwarded, of RFC 7239 Forwarded
// elements. Walking from the right, the first hop not in trusted is the
// client; when all are, the left-most hop (peer when there is none); when
// the walk meets a hop it cannot parse, peer.
func Walk(peer netip.Addr, lines []string, forwarded bool, trusted []netip.Prefix) netip.Addr {
	p := proxies(trusted)
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		var a netip.Addr
		var done, bad bool
		if forwarded {
			a, done, bad = p.walkForwarded(lines[i])
		} else {
			a, done, bad = p.walkList(lines[i])
		}
		if bad {
			return peer
		}
		if a.IsValid() {
			client = a
		}
		if done {
			return client
		}
	}
	return client
}

// proxies are the trusted networks of a walk.
type proxies []netip.Prefix

func (p proxies) trusted(a netip.Addr) bool { return Trusted(p, a) }

// walkList walks one comma-separated X-Forwarded-For (or X-Real-IP) line
// from the right. It returns the left-most hop seen, whether that hop is
// untrusted (the walk is done), and whether a malformed hop stopped it.
// It scans in place: a long header costs no allocation.
func (p proxies) walkList(v string) (last netip.Addr, done, bad bool) {
	end := len(v)
	for end >= 0 {
		start := strings.LastIndexByte(v[:end], ',') + 1
		hop := strings.TrimSpace(v[start:end])
		end = start - 1
		if hop == "" {
			// "a, , b" or a trailing comma: nothing to trust or key by.
			continue
		}
		a, ok := ParseHop(hop)
		if !ok {
			return netip.Addr{}, false, true
		}
		last = a
		if !p.trusted(a) {
			return a, true, false
		}
	}
	return last, false, false
}

// walkForwarded is walkList for one RFC 7239 Forwarded line. It parses
// one forwarded-element at a time from the right, so a malformed element
// that a client wrote to the left of the ones our proxies appended cannot
// spoil them: the walk stops at the first untrusted hop before reaching it.
func (p proxies) walkForwarded(v string) (last netip.Addr, done, bad bool) {
	end := len(v)
	for hops := 0; ; hops++ {
		if hops == maxForwardedHops {
			return netip.Addr{}, false, true
		}
		start := lastElementStart(v[:end])
		elem := v[start:end]
		if strings.TrimSpace(elem) != "" {
			fors, ok := parseForwardedFor(elem)
			if !ok || len(fors) != 1 {
				return netip.Addr{}, false, true
			}
			a, ok := ParseHop(fors[0])
			if !ok {
				return netip.Addr{}, false, true
			}
			last = a
			if !p.trusted(a) {
				return a, true, false
			}
		}
		if start == 0 {
			return last, false, false
		}
		end = start - 1 // the comma before elem
	}
}

// lastElementStart returns where the last forwarded-element of s begins:
// after the last comma outside a quoted-string, or 0.
func lastElementStart(s string) int {
	quoted := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '"':
			if i == 0 || s[i-1] != '\\' {
				quoted = !quoted
			}
		case ',':
			if !quoted {
				return i + 1
			}
		}
	}
	return 0
}

// ParseHop reads one address as proxies write it: "192.0.2.1",
// "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:8080".
// Zones are dropped and IPv4-mapped IPv6 addresses unmapped, so one client
// has one key.
func ParseHop(s string) (netip.Addr, bool) {
	if len(s) > 64 { // longer than any address with a port
		return netip.Addr{}, false
	}
	var a netip.Addr
	var err error
	switch {
	case strings.HasPrefix(s, "["): // [v6] or [v6]:port
		if ap, err2 := netip.ParseAddrPort(s); err2 == nil {
			a = ap.Addr()
		} else if s[len(s)-1] == ']' {
			a, err = netip.ParseAddr(s[1 : len(s)-1])
		} else {
			err = err2
		}
	case strings.Count(s, ":") == 1: // v4:port; parsing it as an address first would cost an error value
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	default:
		a, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// parseForwardedFor returns the "for" values of one Forwarded header line
// (RFC 7239 section 4), unquoted, in order. An element without "for" yields
// an empty value, which ParseHop rejects. It reports false when the line
// does not follow the grammar.
func parseForwardedFor(v string) ([]string, bool) {
	var fors []string
	i := 0
	for {
		// One forwarded-element: pairs separated by ';', ended by ',' or EOL.
		var forVal string
		for {
			i = skipOWS(v, i)
			nameStart := i
			for i < len(v) && isTchar(v[i]) {
				i++
			}
			name := v[nameStart:i]
			if name == "" || i >= len(v) || v[i] != '=' {
				return nil, false
			}
			i++
			var val string
			if i < len(v) && v[i] == '"' {
				var ok bool
				if val, i, ok = readQuoted(v, i); !ok {
					return nil, false
				}
			} else {
				valStart := i
				for i < len(v) && isTchar(v[i]) {
					i++
				}
				val = v[valStart:i]
				if val == "" {
					return nil, false
				}
			}
			if strings.EqualFold(name, "for") {
				forVal = val
			}
			i = skipOWS(v, i)
			if i < len(v) && v[i] == ';' {
				i++
				continue
			}
			break
		}
		fors = append(fors, forVal)
		if len(fors) > maxForwardedHops {
			return nil, false
		}
		if i >= len(v) {
			return fors, true
		}
		if v[i] != ',' {
			return nil, false
		}
		i++
	}
}

// maxForwardedHops bounds the work a hostile Forwarded header can cause.
const maxForwardedHops = 64

func skipOWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// readQuoted reads the quoted-string starting at s[i] == '"'.
func readQuoted(s string, i int) (string, int, bool) {
	var b strings.Builder
	for i++; i < len(s); i++ {
		switch ch := s[i]; ch {
		case '"':
			return b.String(), i + 1, true
		case '\\':
			if i+1 == len(s) {
				return "", i, false
			}
			i++
			b.WriteByte(s[i])
		default:
			b.WriteByte(ch)
		}
	}
	return "", i, false
}

// isTchar reports whether c is an RFC 9110 token character.
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
