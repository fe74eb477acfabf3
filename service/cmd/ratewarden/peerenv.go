package main

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
)

// envoyproxy/ratelimit's environment, read as an alternative to serve's
// own: a deployment written for that service (a Helm chart, Envoy
// Gateway) runs ratewarden unchanged. peerEnv derives the value of each
// RATEWARDEN_ variable that is not set from the peer's variables that
// are, and lists those of the peer's variables that are set but change
// nothing here. docs/service.md has the table.

// peerIgnored are the peer's variables that ratewarden does not read, and
// why; serve logs the ones that are set.
var peerIgnored = map[string]string{
	"USE_STATSD":                              "metrics are Prometheus, on /metrics",
	"STATSD_HOST":                             "metrics are Prometheus, on /metrics",
	"STATSD_PORT":                             "metrics are Prometheus, on /metrics",
	"USE_DOG_STATSD":                          "metrics are Prometheus, on /metrics",
	"USE_DOG_STATSD_MOGRIFIERS":               "metrics are Prometheus, on /metrics",
	"EXTRA_TAGS":                              "metrics are Prometheus, on /metrics",
	"STATS_FLUSH_INTERVAL":                    "Prometheus scrapes; nothing is flushed",
	"DISABLE_STATS":                           "metrics are always on; do not scrape them to ignore them",
	"PROMETHEUS_PATH":                         "the path is /metrics",
	"PROMETHEUS_MAPPER_YAML":                  "ratewarden's metric names are its own (docs/service.md#metrics)",
	"RUNTIME_IGNOREDOTFILES":                  "only *.yaml and *.yml files are read, so dot files named otherwise are skipped anyway",
	"RUNTIME_WATCH_ROOT":                      "the config directory is watched (notifications and polling), whatever the root",
	"EXPIRATION_JITTER_MAX_SECONDS":           "keys expire with their window, on Redis' clock; there is no jitter to add",
	"LOCAL_CACHE_SIZE_IN_BYTES":               "over-limit keys need no local cache: rejected hits are not counted, and the Redis stack's deny cache already spares Redis the checks of a key known to be over",
	"CACHE_KEY_PREFIX":                        "keys are ratewarden's own (rw:{...}); they cannot share a Redis with envoyproxy/ratelimit's counters anyway",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "always so: a rejected hit consumes nothing",
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "a config is always loaded before serving; /readyz and gRPC health report the store",
	"REDIS_POOL_SIZE":                         "the client pipelines on a few connections (pool_size= in the URL for the unpipelined pool)",
	"REDIS_PIPELINE_WINDOW":                   "the client pipelines automatically (max_flush_delay= in the URL)",
	"REDIS_PIPELINE_LIMIT":                    "the client pipelines automatically",
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":            "the client pipelines; there is no pool to run out of",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION":    "Redis health is always watched: /readyz and gRPC health",
	"REDIS_PERSECOND":                         "every limit is decided on the one Redis of REDIS_URL",
	"REDIS_PERSECOND_URL":                     "every limit is decided on the one Redis of REDIS_URL",
	"REDIS_PERSECOND_TYPE":                    "every limit is decided on the one Redis of REDIS_URL",
	"REDIS_PERSECOND_AUTH":                    "every limit is decided on the one Redis of REDIS_URL",
	"REDIS_PERSECOND_TLS":                     "every limit is decided on the one Redis of REDIS_URL",
	"REDIS_PERSECOND_SOCKET_TYPE":             "every limit is decided on the one Redis of REDIS_URL",
	"REDIS_PERSECOND_POOL_SIZE":               "every limit is decided on the one Redis of REDIS_URL",
	"REDIS_PERSECOND_TIMEOUT":                 "every limit is decided on the one Redis of REDIS_URL",
	"GRPC_MAX_CONNECTION_AGE":                 "connections are not aged out",
	"GRPC_MAX_CONNECTION_AGE_GRACE":           "connections are not aged out",
	"FORCE_START_WITHOUT_INITIAL_CONFIG":      "with xDS the service always starts (with no Envoy domain, so every request is OK) and applies the first configuration when it comes",
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR":        "each wait is drawn between half and all of the backoff",
	"XDS_CLIENT_BACKOFF_JITTER":               "the backoff always has jitter",
	"GLOBAL_SHADOW_MODE":                      "not a variable of envoyproxy/ratelimit (its global shadow mode is SHADOW_MODE, which is read)",
}

// peerRefused are values of the peer's variables ratewarden cannot
// honour: serve stops with the reason rather than run differently.
func peerRefused(getenv func(string) string) error {
	if v := strings.ToLower(getenv("BACKEND_TYPE")); v != "" && v != "redis" {
		return fmt.Errorf("BACKEND_TYPE=%s: only redis is supported", getenv("BACKEND_TYPE"))
	}
	for _, v := range []string{"MEMCACHE_HOST_PORT", "MEMCACHE_SRV"} {
		if getenv(v) != "" {
			return fmt.Errorf("%s is set: memcached is not supported, only Redis", v)
		}
	}
	if getenv("GRPC_UDS") != "" {
		return fmt.Errorf("GRPC_UDS is set: a gRPC unix socket is not supported; use GRPC_HOST and GRPC_PORT")
	}
	return nil
}

// peerEnv returns getenv with the RATEWARDEN_ variables that are not set
// derived from envoyproxy/ratelimit's, and the peer's variables that are
// set and ignored, each with why.
func peerEnv(getenv func(string) string) (func(string) string, []string, error) {
	if err := peerRefused(getenv); err != nil {
		return nil, nil, err
	}
	d := map[string]string{}
	set := func(ours, v string) {
		if v != "" && getenv(ours) == "" {
			d[ours] = v
		}
	}
	set("RATEWARDEN_HTTP_ADDR", hostPort(getenv, "HOST", "PORT", "8080"))
	set("RATEWARDEN_GRPC_ADDR", hostPort(getenv, "GRPC_HOST", "GRPC_PORT", "8081"))
	var notes []string
	admin := hostPort(getenv, "DEBUG_HOST", "DEBUG_PORT", "6070")
	if prom, _ := strconv.ParseBool(getenv("USE_PROMETHEUS")); prom {
		// Scrapers look for /metrics at PROMETHEUS_ADDR: the admin
		// address goes there, /rlconfig with it.
		if admin != "" {
			notes = append(notes, "DEBUG_HOST, DEBUG_PORT: with USE_PROMETHEUS=true the admin address (/metrics, /rlconfig) is PROMETHEUS_ADDR")
		}
		admin = getenv("PROMETHEUS_ADDR")
		if admin == "" {
			admin = ":9090"
		}
	} else if getenv("PROMETHEUS_ADDR") != "" {
		notes = append(notes, "PROMETHEUS_ADDR: ignored without USE_PROMETHEUS=true, as there")
	}
	set("RATEWARDEN_ADMIN_ADDR", admin)
	set("RATEWARDEN_LOG_LEVEL", peerLogLevel(getenv("LOG_LEVEL")))
	set("RATEWARDEN_LOG_FORMAT", strings.ToLower(getenv("LOG_FORMAT")))
	if ct := strings.ToUpper(getenv("CONFIG_TYPE")); ct == "" || ct == "FILE" {
		// With xDS the RUNTIME_ variables (Envoy Gateway sets them) name
		// no config.
		set("RATEWARDEN_CONFIG", runtimeDir(getenv))
	}
	set("RATEWARDEN_REDIS_TIMEOUT", getenv("REDIS_TIMEOUT"))
	set("RATEWARDEN_REDIS_CA", getenv("REDIS_TLS_CACERT"))
	set("RATEWARDEN_REDIS_CERT", getenv("REDIS_TLS_CLIENT_CERT"))
	set("RATEWARDEN_REDIS_KEY", getenv("REDIS_TLS_CLIENT_KEY"))
	if on, _ := strconv.ParseBool(getenv("GRPC_SERVER_USE_TLS")); on {
		set("RATEWARDEN_TLS_CERT", getenv("GRPC_SERVER_TLS_CERT"))
		set("RATEWARDEN_TLS_KEY", getenv("GRPC_SERVER_TLS_KEY"))
		set("RATEWARDEN_TLS_CLIENT_CA", getenv("GRPC_CLIENT_TLS_CACERT"))
		set("RATEWARDEN_TLS_SERVERS", "grpc") // the peer's HTTP port stays plain
	}
	redis, err := peerRedisURL(getenv)
	if err != nil {
		return nil, nil, err
	}
	set("RATEWARDEN_REDIS_URL", redis)
	ignored := notes
	for v, why := range peerIgnored {
		if getenv(v) != "" && (v != "PROMETHEUS_PATH" || getenv(v) != "/metrics") {
			ignored = append(ignored, v+": "+why)
		}
	}
	slices.Sort(ignored)
	return func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return d[name]
	}, ignored, nil
}

// hostPort is the peer's HOST and PORT pair as an address, "" when
// neither is set. Its host default is 0.0.0.0, every IPv4 interface.
func hostPort(getenv func(string) string, hostVar, portVar, defPort string) string {
	h, p := getenv(hostVar), getenv(portVar)
	if h == "" && p == "" {
		return ""
	}
	if p == "" {
		p = defPort
	}
	return net.JoinHostPort(h, p)
}

// peerLogLevel maps logrus' levels to slog's: trace is debug, fatal and
// panic are error.
func peerLogLevel(v string) string {
	switch v = strings.ToLower(v); v {
	case "trace":
		return "debug"
	case "warning":
		return "warn"
	case "fatal", "panic":
		return "error"
	}
	return v
}

// runtimeDir is the peer's config directory,
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (defaults
// /srv/runtime_data/current, "", config), when either of the first two
// is set.
func runtimeDir(getenv func(string) string) string {
	root, sub := getenv("RUNTIME_ROOT"), getenv("RUNTIME_SUBDIRECTORY")
	if root == "" && sub == "" {
		return ""
	}
	if root == "" {
		root = "/srv/runtime_data/current"
	}
	app := getenv("RUNTIME_APPDIRECTORY")
	if app == "" {
		app = "config"
	}
	return path.Join(root, sub, app)
}

// peerRedisURL builds a Redis URL in the library's grammar from the
// peer's REDIS_URL (host:port; a comma list of nodes for CLUSTER; the
// master set then the sentinels for SENTINEL; a socket path for
// REDIS_SOCKET_TYPE=unix), REDIS_TYPE, REDIS_AUTH ("password" or
// "user:password"), REDIS_SENTINEL_AUTH and REDIS_TLS. A REDIS_URL that
// is already a URL is taken as it is. "" without REDIS_URL.
func peerRedisURL(getenv func(string) string) (string, error) {
	raw := getenv("REDIS_URL")
	if raw == "" {
		return "", nil
	}
	if strings.Contains(raw, "://") {
		return raw, nil
	}
	tlsOn, _ := strconv.ParseBool(getenv("REDIS_TLS"))
	var user *url.Userinfo
	if a := getenv("REDIS_AUTH"); a != "" {
		if u, p, ok := strings.Cut(a, ":"); ok {
			user = url.UserPassword(u, p)
		} else {
			user = url.UserPassword("", a)
		}
	}
	u := &url.URL{Scheme: "redis", User: user}
	if tlsOn {
		u.Scheme = "rediss"
	}
	if strings.EqualFold(getenv("REDIS_SOCKET_TYPE"), "unix") || strings.HasPrefix(raw, "/") {
		if tlsOn {
			return "", fmt.Errorf("REDIS_TLS with a unix socket: not supported")
		}
		u.Scheme, u.Path = "unix", raw
		return u.String(), nil
	}
	switch t := strings.ToUpper(getenv("REDIS_TYPE")); t {
	case "", "SINGLE", "CLUSTER":
		u.Host = raw
	case "SENTINEL":
		master, nodes, ok := strings.Cut(raw, ",")
		if !ok || nodes == "" {
			return "", fmt.Errorf("REDIS_TYPE=SENTINEL: REDIS_URL must be the master set then the sentinels, comma-separated")
		}
		u.Scheme += "-sentinel"
		u.Host, u.Path = nodes, "/"+master
		if a := getenv("REDIS_SENTINEL_AUTH"); a != "" {
			q := url.Values{}
			if su, sp, ok := strings.Cut(a, ":"); ok {
				q.Set("sentinel_user", su)
				q.Set("sentinel_password", sp)
			} else {
				q.Set("sentinel_password", a)
			}
			u.RawQuery = q.Encode()
		}
	default:
		return "", fmt.Errorf("REDIS_TYPE=%s: want SINGLE, CLUSTER or SENTINEL", getenv("REDIS_TYPE"))
	}
	return u.String(), nil
}
