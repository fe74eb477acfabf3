package redisstore

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

// DefaultSentinelRefresh is how often a Sentinel client made by ParseURL
// checks the sentinels for the current primary, in addition to following
// their +switch-master events (query parameter sentinel_refresh).
const DefaultSentinelRefresh = 5 * time.Second

// ParseURL turns a connection URL into a rueidis.ClientOption for New,
// with client-side caching off (the Store does not use it). The forms:
//
//	redis://[[user]:password@]host[:port][,host[:port]...][/db][?param=value...]
//	rediss://...                     the same over TLS
//	redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/master-set[/db][?param=value...]
//	rediss-sentinel://...            the same over TLS (to sentinels and Redis)
//	unix://[[user]:password@]/path/to/redis.sock[?db=N]
//
// One redis:// address may be a standalone server or any node of a
// Cluster: the client asks it for the cluster's slots and falls back to a
// single server when cluster mode is off. Several comma-separated addresses
// (or addr=host:port parameters) are Cluster seed nodes. The default port
// is 6379, 26379 for sentinels. For Sentinel the hosts are the sentinels
// and the path names the monitored master set; the client follows
// failovers.
//
// user and password authenticate to Redis (AUTH user password, for ACL
// users; a password alone authenticates as the default user). Escape
// reserved characters in them (url.UserPassword does). Sentinels that
// require their own credentials take sentinel_user and sentinel_password.
//
// Parameters (all optional; defaults are rueidis'):
//
//	db=N                    database number (standalone and Sentinel; Cluster has only 0)
//	dial_timeout=5s         connect timeout
//	write_timeout=10s       a connection with no reply for this long is closed
//	pipeline_multiplex=N    2^N pipelined connections per Redis node (default 2
//	                        for standalone and Sentinel, 0 for Cluster; at most 8)
//	max_flush_delay=0       wait up to this long to batch more commands per write
//	                        (e.g. 20us: less CPU under load, a little latency)
//	auto_pipelining=true    false sends each command on a pooled connection instead
//	pool_size=1024          that pool's size per node (auto_pipelining=false)
//	shards_refresh=0        Cluster: re-read the slot map this often (0: only on
//	                        MOVED and connection errors)
//	sentinel_refresh=5s     Sentinel: re-check the primary this often (0: events only)
//	master_set=NAME         Sentinel in rueidis' own form: redis://sentinel:26379?master_set=NAME
//	                        is redis-sentinel://sentinel:26379/NAME (so URLs written
//	                        for rueidis.ParseURL keep working)
//	client_name=NAME        CLIENT SETNAME, shown by CLIENT LIST
//	protocol=2              speak RESP2 (default: RESP3 when the server has it)
//	max_retries=0           do not retry read-only commands on network errors
//	skip_verify=true        TLS: do not verify the server's certificate (tests only)
//	tls_ca_file=PATH        TLS: verify servers against this PEM CA, not the system roots
//	tls_cert_file=PATH      TLS: a client certificate (PEM) for servers that ask for one,
//	tls_key_file=PATH       with its key; the two go together
//	tls_server_name=NAME    TLS: the name to verify (default: the first host)
//	addr=host:port          another Cluster seed (repeatable)
//
// An unknown parameter, a malformed value or a bad scheme is an error
// wrapping ratewarden.ErrInvalidConfig that names it; the password never
// appears in an error.
//
// TLS verifies every node's certificate against the system roots (or
// tls_ca_file), for the name of the first host in the URL or
// tls_server_name (rueidis uses one ServerName for all connections); the
// sentinels of a rediss-sentinel:// URL get the same settings. Anything
// else: adjust TLSConfig (and, for Sentinel, Sentinel.TLSConfig) on the
// returned option before rueidis.NewClient.
func ParseURL(rawURL string) (rueidis.ClientOption, error) {
	opt, err := parseURL(rawURL)
	if err != nil {
		return rueidis.ClientOption{}, err
	}
	return opt, nil
}

func parseURL(rawURL string) (rueidis.ClientOption, error) {
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
	for _, step := range []func(*rueidis.ClientOption, url.Values, bool) error{checkParsed, applyTLS, applySentinel, applyTuning} {
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

// applySentinel sets the Sentinel options of a Sentinel URL and refuses
// sentinel_* parameters elsewhere.
func applySentinel(opt *rueidis.ClientOption, q url.Values, sentinel bool) error {
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
	opt.Sentinel.TopologyRefreshInterval = DefaultSentinelRefresh
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

// RedactURL returns rawURL with its password replaced by "xxxxx", for logs
// and error messages, even when rawURL does not parse (url.Parse takes no
// comma-separated host lists).
func RedactURL(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Redacted()
	}
	// The authority runs from "://" to the first '/', '?' or '#'; its
	// userinfo ends at its last '@'.
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "(unparsable URL)"
	}
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return rawURL
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if hasPass {
		user += ":xxxxx"
	}
	return scheme + "://" + user + rest[at:]
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

// urlParam is one query parameter of the grammar ParseURL documents.
type urlParam struct {
	name string
	// rueidis: handed on to rueidis.ParseURL, which reads it (checkParsed
	// then refuses what rueidis accepts but the Store does not).
	rueidis bool
	// apply reads the value into the option (applyTuning). Parameters with
	// neither are read where their meaning lives: addr and master_set with
	// the hosts, sentinel_* in applySentinel, client_cache in checkParams.
	apply func(opt *rueidis.ClientOption, v string) error
}

// urlParams is every parameter ParseURL knows; any other is an error.
var urlParams = []urlParam{
	{name: "db", rueidis: true},
	{name: "dial_timeout", rueidis: true},
	{name: "write_timeout", rueidis: true},
	{name: "client_name", rueidis: true},
	{name: "protocol", rueidis: true},
	{name: "max_retries", rueidis: true},
	{name: "skip_verify", rueidis: true},
	{name: "pipeline_multiplex", apply: intParam(0, rueidis.MaxPipelineMultiplex, func(o *rueidis.ClientOption, n int) { o.PipelineMultiplex = n })},
	{name: "pool_size", apply: intParam(1, 1<<20, func(o *rueidis.ClientOption, n int) { o.BlockingPoolSize = n })},
	{name: "max_flush_delay", apply: durParam(func(o *rueidis.ClientOption, d time.Duration) { o.MaxFlushDelay = d })},
	{name: "shards_refresh", apply: durParam(func(o *rueidis.ClientOption, d time.Duration) { o.ClusterOption.ShardsRefreshInterval = d })},
	{name: "sentinel_refresh", apply: durParam(func(o *rueidis.ClientOption, d time.Duration) { o.Sentinel.TopologyRefreshInterval = d })},
	{name: "auto_pipelining", apply: func(o *rueidis.ClientOption, v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		o.DisableAutoPipelining = !on
		return nil
	}},
	{name: "addr"},
	{name: "master_set"},
	{name: "sentinel_user"},
	{name: "sentinel_password"},
	{name: "client_cache"},
	{name: "tls_ca_file"},
	{name: "tls_cert_file"},
	{name: "tls_key_file"},
	{name: "tls_server_name"},
}

func paramNamed(name string) *urlParam {
	for i := range urlParams {
		if urlParams[i].name == name {
			return &urlParams[i]
		}
	}
	return nil
}

// intParam reads an integer from lo to hi.
func intParam(lo, hi int, set func(*rueidis.ClientOption, int)) func(*rueidis.ClientOption, string) error {
	return func(o *rueidis.ClientOption, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("want an integer from %d to %d, got %q", lo, hi, v)
		}
		set(o, n)
		return nil
	}
}

// durParam reads a duration >= 0.
func durParam(set func(*rueidis.ClientOption, time.Duration)) func(*rueidis.ClientOption, string) error {
	return func(o *rueidis.ClientOption, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("want a duration >= 0 such as 5s or 20us, got %q", v)
		}
		set(o, d)
		return nil
	}
}

func urlErr(format string, args ...any) error {
	return fmt.Errorf("redisstore: connection URL: %s: %w", fmt.Sprintf(format, args...), ratewarden.ErrInvalidConfig)
}

// ClientFromURL returns a rueidis client for rawURL (see ParseURL), ready
// for New. It connects before returning: an unreachable server is an error
// wrapping ratewarden.ErrStoreUnavailable. Close the client after the last
// use of the Store.
func ClientFromURL(rawURL string) (rueidis.Client, error) {
	opt, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redisstore: connect to %s: %w: %w", RedactURL(rawURL), ratewarden.ErrStoreUnavailable, err)
	}
	return c, nil
}
