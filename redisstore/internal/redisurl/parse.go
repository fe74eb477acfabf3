// Package redisurl reads the Redis connection URLs of redisstore.ParseURL
// into rueidis options; that function's doc comment is the grammar users
// read. rueidis.ParseURL does the core (one address, credentials,
// database, TLS on or off, timeouts); this package adds what it lacks:
// host lists, the sentinel schemes, the tuning and TLS file parameters,
// and the checks that make a typo an error instead of a default.
package redisurl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/redis/rueidis"
)

// Parse returns the options for rawURL, with client-side caching off.
// sentinelRefresh is how often a Sentinel client re-checks the primary
// when the URL has no sentinel_refresh. An error wraps
// ratewarden.ErrInvalidConfig, starts "connection URL: " and never holds
// the password; the options are then zero.
func Parse(rawURL string, sentinelRefresh time.Duration) (rueidis.ClientOption, error) {
	u, hostList, err := splitURL(rawURL)
	if err != nil {
		return rueidis.ClientOption{}, err
	}
	sentinel, scheme, err := urlScheme(u)
	if err != nil {
		return rueidis.ClientOption{}, err
	}
	q := u.Query()
	if err := checkParams(q); err != nil {
		return rueidis.ClientOption{}, err
	}
	if q.Has("master_set") {
		// rueidis' Sentinel form: the hosts are sentinels, on the ports
		// given (6379 when none, as rueidis reads it).
		switch {
		case sentinel:
			return rueidis.ClientOption{}, urlErr("parameter master_set: %s:// names the master set in the path", u.Scheme)
		case u.Scheme == "unix":
			return rueidis.ClientOption{}, urlErr("parameter master_set needs redis:// or rediss:// (sentinel addresses)")
		case len(q["master_set"]) > 1 || q.Get("master_set") == "":
			return rueidis.ClientOption{}, urlErr("parameter master_set: want one non-empty name")
		}
		sentinel = true
	}
	base, err := rueidisURL(u, q, hostList, scheme, sentinel)
	if err != nil {
		return rueidis.ClientOption{}, err
	}
	opt, err := rueidis.ParseURL(base.String())
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return rueidis.ClientOption{}, urlErr("%s", strings.TrimPrefix(err.Error(), "redis: "))
	}
	opt.DisableCache = true
	sentinelStep := func(opt *rueidis.ClientOption, q url.Values, sentinel bool) error {
		return applySentinel(opt, q, sentinel, sentinelRefresh)
	}
	for _, step := range []func(*rueidis.ClientOption, url.Values, bool) error{checkParsed, applyTLS, sentinelStep, applyTuning} {
		if err := step(&opt, q, sentinel); err != nil {
			return rueidis.ClientOption{}, err
		}
	}
	return opt, nil
}

// splitURL parses rawURL and returns its comma-separated host list apart:
// net/url takes one host only, so the list is cut out of the authority and
// the rest parsed with a placeholder host.
func splitURL(rawURL string) (*url.URL, string, error) {
	i := strings.Index(rawURL, "://")
	if i < 0 {
		return nil, "", urlErr("no scheme (want redis://, rediss://, redis-sentinel://, rediss-sentinel:// or unix://)")
	}
	hostList, toParse := "", rawURL
	if !strings.HasPrefix(rawURL, "unix:") {
		rest := rawURL[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		userinfo, hosts := "", rest[:end]
		if at := strings.LastIndex(hosts, "@"); at >= 0 {
			userinfo, hosts = hosts[:at+1], hosts[at+1:]
		}
		hostList, toParse = hosts, rawURL[:i+3]+userinfo+"placeholder"+rest[end:]
	}
	u, err := url.Parse(toParse)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password included
		}
		return nil, "", urlErr("%v", err)
	}
	return u, hostList, nil
}

// urlScheme checks u's scheme and returns whether it is a Sentinel URL and
// the scheme rueidis reads for it.
func urlScheme(u *url.URL) (sentinel bool, scheme string, err error) {
	scheme = u.Scheme
	switch u.Scheme {
	case "redis", "rediss":
	case "redis-sentinel":
		sentinel, scheme = true, "redis"
	case "rediss-sentinel":
		sentinel, scheme = true, "rediss"
	case "unix":
		if strings.Contains(u.Host, ",") {
			return false, "", urlErr("unix: one socket path only")
		}
	case "":
		return false, "", urlErr("no scheme (want redis://, rediss://, redis-sentinel://, rediss-sentinel:// or unix://)")
	default:
		return false, "", urlErr("unknown scheme %q (want redis, rediss, redis-sentinel, rediss-sentinel or unix)", u.Scheme)
	}
	if u.Opaque != "" {
		return false, "", urlErr("%s: want %s://host...", u.Scheme, u.Scheme)
	}
	return sentinel, scheme, nil
}

func checkParams(q url.Values) error {
	for name := range q {
		if paramNamed(name) == nil {
			return urlErr("unknown parameter %q", name)
		}
	}
	if q.Has("client_cache") {
		return urlErr("parameter client_cache: the Store does not use client-side caching; it is always off")
	}
	return nil
}

// rueidisURL is u in the form rueidis.ParseURL reads: the parameters it
// knows, the hosts after the first as addr parameters, and a Sentinel
// URL's master set moved from the path to master_set.
func rueidisURL(u *url.URL, q url.Values, hostList, scheme string, sentinel bool) (url.URL, error) {
	base := *u
	base.Scheme = scheme
	bq := url.Values{}
	for _, p := range urlParams {
		name := p.name
		if vs, ok := q[name]; ok && p.rueidis {
			if len(vs) > 1 {
				return base, urlErr("parameter %s given %d times", name, len(vs))
			}
			bq[name] = vs
		}
	}
	if u.Scheme != "unix" {
		hosts, err := urlHosts(hostList, q["addr"], sentinel && !q.Has("master_set"))
		if err != nil {
			return base, err
		}
		base.Host = hosts[0]
		bq["addr"] = hosts[1:]
		switch {
		case q.Has("master_set"):
			bq.Set("master_set", q.Get("master_set"))
		case sentinel:
			if err := moveMasterSet(&base, q, bq); err != nil {
				return base, err
			}
		}
	}
	base.RawQuery = bq.Encode()
	return base, nil
}

// urlHosts is the URL's host list and its addr parameters as host:port
// addresses.
func urlHosts(hostList string, addrs []string, sentinel bool) ([]string, error) {
	defPort := "6379"
	if sentinel {
		defPort = "26379"
	}
	var hosts []string
	for h := range strings.SplitSeq(hostList, ",") {
		addr, err := hostPort(h, defPort)
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, addr)
	}
	for _, a := range addrs {
		if sentinel {
			return nil, urlErr("parameter addr: list sentinels as comma-separated hosts")
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			return nil, urlErr("parameter addr: bad address %q (want host:port)", a)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, urlErr("parameter addr: bad port in %q", a)
		}
		hosts = append(hosts, a)
	}
	return hosts, nil
}

// moveMasterSet moves a Sentinel URL's "/<master set>[/<db>]" path into
// the master_set and db parameters.
func moveMasterSet(base *url.URL, q, bq url.Values) error {
	set, db, _ := strings.Cut(strings.Trim(base.Path, "/"), "/")
	if set == "" {
		return urlErr("redis-sentinel: the path must name the master set (redis-sentinel://host:26379/mymaster)")
	}
	set, err := url.PathUnescape(set)
	if err != nil {
		return urlErr("master set: %v", err)
	}
	bq.Set("master_set", set)
	base.Path, base.RawPath = "", ""
	if db != "" {
		if q.Has("db") {
			return urlErr("database given both in the path and as db")
		}
		bq.Set("db", db)
	}
	return nil
}

// checkParsed checks what rueidis.ParseURL accepts but the Store does not.
func checkParsed(opt *rueidis.ClientOption, q url.Values, _ bool) error {
	if p := q.Get("protocol"); p != "" && p != "2" && p != "3" {
		return urlErr("parameter protocol: want 2 or 3, got %q", p)
	}
	if r := q.Get("max_retries"); r != "" {
		if n, err := strconv.Atoi(r); err != nil || n < 0 {
			return urlErr("parameter max_retries: want an integer >= 0, got %q", r)
		}
	}
	if opt.SelectDB < 0 {
		return urlErr("database number must be >= 0, got %d", opt.SelectDB)
	}
	if opt.TLSConfig == nil && q.Has("skip_verify") {
		return urlErr("parameter skip_verify needs TLS (rediss:// or rediss-sentinel://)")
	}
	return nil
}

// applySentinel sets the Sentinel options of a Sentinel URL, refreshing
// every refresh unless sentinel_refresh says otherwise (applyTuning reads
// it after), and refuses sentinel_* parameters elsewhere.
func applySentinel(opt *rueidis.ClientOption, q url.Values, sentinel bool, refresh time.Duration) error {
	if !sentinel {
		if q.Has("sentinel_user") || q.Has("sentinel_password") || q.Has("sentinel_refresh") {
			return urlErr("sentinel_* parameters need redis-sentinel:// or rediss-sentinel://")
		}
		return nil
	}
	opt.Sentinel.Username, opt.Sentinel.Password = q.Get("sentinel_user"), q.Get("sentinel_password")
	opt.Sentinel.Dialer = opt.Dialer
	if opt.TLSConfig != nil {
		opt.Sentinel.TLSConfig = opt.TLSConfig.Clone()
	}
	opt.Sentinel.TopologyRefreshInterval = refresh
	return nil
}

// applyTuning reads the parameters the table gives a reader of their own
// (pipelining, pool, refresh intervals), in the table's order.
func applyTuning(opt *rueidis.ClientOption, q url.Values, _ bool) error {
	for _, p := range urlParams {
		if p.apply == nil || !q.Has(p.name) {
			continue
		}
		if err := p.apply(opt, q.Get(p.name)); err != nil {
			return urlErr("parameter %s: %v", p.name, err)
		}
	}
	return nil
}

// hostPort returns h as host:port, with defPort when h has no port.
func hostPort(h, defPort string) (string, error) {
	if h == "" {
		return "", urlErr("empty host")
	}
	host, port := h, defPort
	switch {
	case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]"): // [v6]
		host = h[1 : len(h)-1]
	case strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1: // [v6]:port, host:port
		var err error
		if host, port, err = net.SplitHostPort(h); err != nil {
			return "", urlErr("bad host %q", h)
		}
	case strings.Contains(h, ":"):
		return "", urlErr("bad host %q (put IPv6 addresses in brackets)", h)
	}
	if host == "" {
		return "", urlErr("empty host in %q", h)
	}
	if strings.HasPrefix(h, "[") {
		if _, err := netip.ParseAddr(host); err != nil {
			return "", urlErr("bad IPv6 address in %q", h)
		}
	} else if strings.ContainsFunc(host, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_')
	}) {
		return "", urlErr("bad host %q", h)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", urlErr("bad port in %q", h)
	}
	return net.JoinHostPort(host, port), nil
}

// urlErr is an error about the URL; redisstore.ParseURL prefixes the
// package name.
func urlErr(format string, args ...any) error {
	return fmt.Errorf("connection URL: %s: %w", fmt.Sprintf(format, args...), ratewarden.ErrInvalidConfig)
}
