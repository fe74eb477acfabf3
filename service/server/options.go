package server

import (
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/server/api"
	"github.com/ratewarden/ratewarden/service/server/rls"
)

// DefaultNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO default.
const DefaultNearLimitRatio = 0.8

// WithNearLimitRatio sets the share of a limit past which allowed hits
// count in ratewarden_near_limit_total, as envoyproxy/ratelimit's
// near_limit statistic (NEAR_LIMIT_RATIO): with a limit of 10 and 0.8,
// the 9th and 10th hits of a window are near the limit. Above 0, at most
// 1; default DefaultNearLimitRatio.
func WithNearLimitRatio(r float64) Option {
	return func(o *options) { o.nearRatio = r }
}

// WithEnvoyCompat sets envoyproxy/ratelimit's settings the gRPC service
// follows; see rls.EnvoyCompat.
func WithEnvoyCompat(c rls.EnvoyCompat) Option {
	return func(o *options) { o.envoy = c }
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
	return func(o *options) { o.tracer = tp }
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
	return func(o *options) {
		o.secrets = make([][]byte, len(secrets))
		for i, s := range secrets {
			o.secrets[i] = append([]byte(nil), s...)
		}
		o.secretsGiven = true
	}
}

// validateSecrets names the first secret too short, or says none came,
// when WithReservationSecrets was given.
func (o *options) validateSecrets() error {
	if !o.secretsGiven {
		return nil
	}
	msg := ""
	if len(o.secrets) == 0 {
		msg = "no secret given"
	}
	for i, s := range o.secrets {
		if len(s) < api.MinSecretBytes && msg == "" {
			msg = fmt.Sprintf("secret %d is %d bytes, want at least %d", i, len(s), api.MinSecretBytes)
		}
	}
	if msg != "" {
		return fmt.Errorf("server: WithReservationSecrets: %s: %w", msg, ratewarden.ErrInvalidConfig)
	}
	return nil
}
