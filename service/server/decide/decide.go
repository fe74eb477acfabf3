package decide

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/nilcheck"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server/telemetry"
)

// Backend hands the server the stores it decides on.
type Backend interface {
	// Store returns the store for limits with failure policy fp. The
	// server asks once per failure policy (again after an error) and
	// keeps a Limiter on the store (Limiters).
	Store(fp fallback.Policy) (ratewarden.Store, error)
	// Ready reports whether limits with failure policy fp are decided by
	// the shared store now (nil) or not (why).
	Ready(ctx context.Context, fp fallback.Policy) error
	// Breakers reports the circuit breaker state of each store built so
	// far. Nil when there is no breaker.
	Breakers() map[fallback.Policy]fallback.State
}

// Limiters holds the Limiter of each failure policy, made on first use
// on the backend's store for it, metered (telemetry.Meter): the one way
// the server's APIs reach a store.
type Limiters struct {
	backend Backend
	m       *telemetry.Metrics
	tracer  trace.Tracer // nil: no spans
	// byPolicy is indexed by the policy (0, no policy, unused), read
	// without a lock or a map lookup.
	byPolicy [fallback.LocalFallback + 1]atomic.Pointer[ratewarden.Limiter]
}

// NewLimiters returns the Limiters of backend, whose store calls count in
// m and, with a tracer, are traced.
func NewLimiters(backend Backend, m *telemetry.Metrics, tr trace.Tracer) *Limiters {
	return &Limiters{backend: backend, m: m, tracer: tr}
}

// For returns the Limiter of failure policy fp, built on the first
// store the backend hands out for it; store calls through it are timed and
// counted by op and failure policy. A backend failure is a store failure.
func (ls *Limiters) For(fp fallback.Policy) (*ratewarden.Limiter, error) {
	i := -1
	if fp >= fallback.FailOpen && int(fp) < len(ls.byPolicy) {
		i = int(fp)
		if l := ls.byPolicy[i].Load(); l != nil {
			return l, nil
		}
	}
	st, err := ls.backend.Store(fp)
	if err == nil && nilcheck.Is(st) {
		err = fmt.Errorf("no store%s", nilcheck.Describe(st))
	}
	if err != nil {
		// %v: whatever the backend's error wraps, this is the store's
		// failure (503 / UNAVAILABLE), not the caller's input.
		return nil, fmt.Errorf("decide: store for %s: %v: %w", fp, err, ratewarden.ErrStoreUnavailable)
	}
	l, err := ratewarden.New(telemetry.Meter(st, fp, ls.m, ls.tracer))
	if err != nil {
		return nil, fmt.Errorf("decide: limiter for %s: %v: %w", fp, err, ratewarden.ErrStoreUnavailable)
	}
	if i < 0 {
		return l, nil // not a policy the config can name: never kept
	}
	if !ls.byPolicy[i].CompareAndSwap(nil, l) {
		return ls.byPolicy[i].Load(), nil // another request made it first
	}
	return l, nil
}

// Failure resolves a limit's failure policy: the first one set among
// fps (the limit's own, then its domain's), then cfg's top level, then
// def, the server's default.
func Failure(cfg *config.Config, def fallback.Policy, fps ...fallback.Policy) fallback.Policy {
	for _, fp := range fps {
		if fp != 0 {
			return fp
		}
	}
	if cfg.Failure != 0 {
		return cfg.Failure
	}
	return def
}

// DraftSet is the headers both APIs answer with: RateLimit-Policy and
// RateLimit (the IETF draft) and X-RateLimit-*, the HTTP API's and
// rls.HeadersRatewarden's.
const DraftSet = httplimit.DraftHeaders | httplimit.XRateLimitHeaders

// KeyHash names a caller key in logs without writing it: the first 12 hex
// digits of its SHA-256.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// Redact replaces key in msg by its hash: a store's error may quote the
// key, and logs never hold one.
func Redact(msg, key string) string {
	if key == "" {
		return msg
	}
	return strings.ReplaceAll(msg, key, "<key "+KeyHash(key)+">")
}
