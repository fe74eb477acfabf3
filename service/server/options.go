package server

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	svcconfig "github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/tlsfiles"
	"github.com/ratewarden/ratewarden/service/server/api"
	"github.com/ratewarden/ratewarden/service/server/rls"
)

// Defaults.
const (
	DefaultMaxBodyBytes = 64 << 10
	// DefaultMaxKeyBytes caps a caller key (HTTP "key") and the key
	// derived from an Envoy request's descriptor entries.
	DefaultMaxKeyBytes    = 1 << 10
	DefaultReloadInterval = time.Second
	// DefaultNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO
	// default.
	DefaultNearLimitRatio = 0.8
)

// Option configures a Server. Options only record their value; New
// validates what they collected, in one place, and fails with an error
// wrapping ratewarden.ErrInvalidConfig that names the option at fault.
// When an option is given twice, the last one counts.
type Option func(*config)

// config is what the options of New collect, on top of its defaults.
type config struct {
	cfg            *svcconfig.Config
	cfgGiven       bool
	paths          []string
	pathsGiven     bool
	interval       time.Duration
	log            *slog.Logger
	token          string
	defaultFailure fallback.Policy
	maxBody        int64
	maxKey         int
	inline         svcconfig.InlineLimits
	adminAddr      string
	envoy          rls.EnvoyCompat
	nearRatio      float64
	tls            tlsfiles.Server
	tlsOn          TLSServers // 0: no TLS
	tracer         trace.TracerProvider
	secrets        [][]byte
	secretsGiven   bool
}

// defaults is the config of a New given no option.
func defaults() config {
	return config{
		log:            slog.Default(),
		defaultFailure: fallback.LocalFallback,
		interval:       DefaultReloadInterval,
		maxBody:        DefaultMaxBodyBytes,
		maxKey:         DefaultMaxKeyBytes,
		nearRatio:      DefaultNearLimitRatio,
	}
}

// WithConfig sets a configuration that is already loaded (no reload).
func WithConfig(cfg *svcconfig.Config) Option {
	return func(c *config) { c.cfg, c.cfgGiven = cfg, true }
}

// WithConfigPaths loads the configuration from files or directories and
// reloads it when their contents change, about 50 ms after a settled
// change (filesystem notifications, and polling every WithReloadInterval
// as the fallback), or when Reload is called (on SIGHUP, say). With
// rls.EnvoyCompat.MergeDomains, documents of one domain are merged.
func WithConfigPaths(paths ...string) Option {
	return func(c *config) { c.paths, c.pathsGiven = paths, true }
}

// WithReloadInterval sets how often config files are polled for changes,
// the fallback for filesystems without notifications; 0 turns watching
// off, notifications too (Reload still works). Default one second.
func WithReloadInterval(d time.Duration) Option {
	return func(c *config) { c.interval = d }
}

// WithLogger sets the logger; default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.log = l }
}

// WithAPIToken requires "Authorization: Bearer <token>" on the /v1 API
// (and /json). Empty means no authentication (the default).
func WithAPIToken(token string) Option {
	return func(c *config) { c.token = token }
}

// WithDefaultFailure sets the failure policy of limits whose config names
// none (directly, by domain or by the top-level failure_policy). Default
// fallback.LocalFallback.
func WithDefaultFailure(fp fallback.Policy) Option {
	return func(c *config) { c.defaultFailure = fp }
}

// WithMaxBodyBytes bounds HTTP API request bodies (413 beyond);
// default 64 KiB.
func WithMaxBodyBytes(n int64) Option {
	return func(c *config) { c.maxBody = n }
}

// WithMaxKeyBytes caps the bytes of a caller key: the HTTP API's "key"
// (400 beyond) and the store key an Envoy descriptor's entries make
// (INVALID_ARGUMENT beyond). Default DefaultMaxKeyBytes (1 KiB).
func WithMaxKeyBytes(n int) Option {
	return func(c *config) { c.maxKey = n }
}

// WithInlineLimits sets whether the HTTP API takes inline limits ("limit"
// instead of "policy") and their maxima; a config's inline_limits, when
// set, gives the maxima instead, and enables them too. Default: off (403).
func WithInlineLimits(il svcconfig.InlineLimits) Option {
	return func(c *config) { c.inline = il }
}

// WithAdminAddr serves /metrics and the detailed /readyz on a separate
// address (Start listens on it; see AdminAddr), and not on the API's.
// Empty (the default): everything on the HTTP address.
func WithAdminAddr(addr string) Option {
	return func(c *config) { c.adminAddr = addr }
}

// WithNearLimitRatio sets the share of a limit past which allowed hits
// count in ratewarden_near_limit_total, as envoyproxy/ratelimit's
// near_limit statistic (NEAR_LIMIT_RATIO): with a limit of 10 and 0.8,
// the 9th and 10th hits of a window are near the limit. Above 0, at most
// 1; default DefaultNearLimitRatio.
func WithNearLimitRatio(r float64) Option {
	return func(c *config) { c.nearRatio = r }
}

// WithEnvoyCompat sets envoyproxy/ratelimit's settings the gRPC service
// follows; see rls.EnvoyCompat.
func WithEnvoyCompat(e rls.EnvoyCompat) Option {
	return func(c *config) { c.envoy = e }
}

// TLSServers names the servers WithTLS applies to.
type TLSServers int

const (
	// TLSGRPC serves gRPC over TLS.
	TLSGRPC TLSServers = 1 << iota
	// TLSHTTP serves the HTTP API, and the admin address when there is
	// one, over TLS.
	TLSHTTP
)

// WithTLS serves the servers on names over TLS with the certificate and
// key f names, read again when the files change (a rotated certificate
// is served without a restart), and requires client certificates signed
// by f.ClientCAFile when one is given (tlsfiles.Server.Config). New
// reads the files: they must load. Default: plaintext.
func WithTLS(f tlsfiles.Server, on TLSServers) Option {
	return func(c *config) { c.tls, c.tlsOn = f, on }
}

// tracerName is the instrumentation scope of the server's spans.
const tracerName = "github.com/ratewarden/ratewarden/service/server"

// WithTracerProvider traces decisions with tp: a span per gRPC
// ShouldRateLimit call (and per /json request, which makes one),
// "ratelimit.ShouldRateLimit", with the domain, the number of
// descriptors and the overall code; under it a span per store call,
// "ratewarden.store.check" (or .peek, .reset), with the failure policy,
// the number of limits, the outcome and the error. No span carries a
// descriptor's values or a caller's key: they can be addresses or
// credentials. The spans join the caller's trace when its gRPC metadata
// or /json headers carry one (W3C traceparent).
// Nil, the default, is no tracing, at no cost.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracer = tp }
}

// WithReservationSecrets sets the secrets that sign reservations
// (/v1/reserve) and check them (/v1/settle): the first signs, every one is
// accepted, so that a new secret can be rolled out to every replica
// before it becomes the first. Replicas that settle each other's
// reservations need the same secrets. Each must be at least
// api.MinSecretBytes long. Default: a random secret of the process, so a
// reservation settles only on the replica that made it, and not after a
// restart.
func WithReservationSecrets(secrets ...[]byte) Option {
	return func(c *config) {
		c.secrets = make([][]byte, len(secrets))
		for i, s := range secrets {
			c.secrets[i] = append([]byte(nil), s...)
		}
		c.secretsGiven = true
	}
}

// newConfig applies opts to the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	c := defaults()
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("server: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	if err := c.validate(); err != nil {
		return config{}, err
	}
	return c, nil
}

// validate names the first option given a value it cannot use. The TLS
// files are read when the server is made (New).
func (c *config) validate() error {
	var msg string
	switch {
	case c.cfgGiven && c.cfg == nil:
		msg = "WithConfig: config must not be nil"
	case c.pathsGiven && len(c.paths) == 0:
		msg = "WithConfigPaths: no config paths given"
	case c.cfgGiven && c.pathsGiven:
		msg = "give WithConfig or WithConfigPaths, not both"
	case !c.cfgGiven && !c.pathsGiven:
		msg = "no configuration (WithConfig or WithConfigPaths)"
	case c.interval < 0:
		msg = fmt.Sprintf("WithReloadInterval: reload interval must be >= 0, got %v", c.interval)
	case c.log == nil:
		msg = "WithLogger: logger must not be nil"
	case c.maxBody <= 0:
		msg = fmt.Sprintf("WithMaxBodyBytes: max body bytes must be > 0, got %d", c.maxBody)
	case c.maxKey <= 0:
		msg = fmt.Sprintf("WithMaxKeyBytes: max key bytes must be > 0, got %d", c.maxKey)
	case !(c.nearRatio > 0 && c.nearRatio <= 1):
		msg = fmt.Sprintf("WithNearLimitRatio: want a ratio above 0, at most 1, got %v", c.nearRatio)
	case c.envoy.Headers < rls.HeadersRatewarden || c.envoy.Headers > rls.HeadersNone:
		msg = fmt.Sprintf("WithEnvoyCompat: unknown Headers %d", c.envoy.Headers)
	case c.inline.MaxPeriod < 0 || c.inline.MaxRate < 0 || c.inline.MaxSlidingLog < 0 || c.inline.MaxCost < 0:
		msg = fmt.Sprintf("WithInlineLimits: maxima must not be negative, got %+v", c.inline)
	case c.tlsOn&^(TLSGRPC|TLSHTTP) != 0 || (c.tlsOn == 0) != (c.tls == tlsfiles.Server{}):
		msg = fmt.Sprintf("WithTLS: give files and servers (TLSGRPC, TLSHTTP or both), got %+v for servers %d", c.tls, c.tlsOn)
	default:
		msg = c.secretsProblem()
	}
	if msg != "" {
		return fmt.Errorf("server: %s: %w", msg, ratewarden.ErrInvalidConfig)
	}
	if _, err := c.defaultFailure.MarshalText(); err != nil { // a policy fallback knows
		return fmt.Errorf("server: WithDefaultFailure: %w", err)
	}
	return nil
}

// secretsProblem names the first secret too short, or says none came,
// when WithReservationSecrets was given; "" when none is.
func (c *config) secretsProblem() string {
	if !c.secretsGiven {
		return ""
	}
	if len(c.secrets) == 0 {
		return "WithReservationSecrets: no secret given"
	}
	for i, s := range c.secrets {
		if len(s) < api.MinSecretBytes {
			return fmt.Sprintf("WithReservationSecrets: secret %d is %d bytes, want at least %d", i, len(s), api.MinSecretBytes)
		}
	}
	return ""
}
