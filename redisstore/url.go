package redisstore

import (
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/redisstore/internal/redisurl"
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
	opt, err := redisurl.Parse(rawURL, DefaultSentinelRefresh)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: %w", err)
	}
	return opt, nil
}

// RedactURL returns rawURL with its password replaced by "xxxxx", for logs
// and error messages, even when rawURL does not parse (url.Parse takes no
// comma-separated host lists).
func RedactURL(rawURL string) string { return redisurl.Redact(rawURL) }

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
