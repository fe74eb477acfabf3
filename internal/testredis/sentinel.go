package testredis

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

// MasterSet is the name the sentinels of StartSentinel monitor.
const MasterSet = redisproc.MasterSet

// SentinelDownAfter is the down-after-milliseconds of StartSentinel's
// sentinels: a primary silent for this long is subjectively down.
const SentinelDownAfter = redisproc.SentinelDownAfter

// Sentinel is a real Sentinel deployment on 127.0.0.1: one primary, one
// replica and three sentinels (quorum 2) monitoring MasterSet (see
// redisproc.Sentinel).
type Sentinel = redisproc.Sentinel

// StartSentinel starts the deployment, waits until every sentinel knows
// the primary, the replica and the other two sentinels and the replica is
// in sync, and registers its shutdown with tb.Cleanup. TestMain uses
// NewSentinel.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	s, err := NewSentinel()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// NewSentinel is StartSentinel for callers without a testing.TB. The
// caller must call Close.
func NewSentinel() (*Sentinel, error) {
	d, err := redisproc.NewSentinel(context.Background())
	if err != nil {
		return nil, fmt.Errorf("testredis: %w", err)
	}
	return d, nil
}
