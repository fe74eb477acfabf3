// Package clustertest holds the tests of redisstore on multi-process Redis
// deployments: a real Redis Cluster of 3 primaries and 3 replicas and a
// real Sentinel setup (1 primary, 1 replica, 3 sentinels), started by
// internal/testredis on loopback ports.
//
// The tests prove that the conformance suite passes on both, that callers'
// keys spread over all primaries while every key of one check shares a
// slot, that an empty script cache on any primary costs callers nothing,
// and that a primary killed under load costs no errors with the
// LocalFallback policy, measuring the degraded window and the
// over-admission it allows (docs/operations.md).
//
// The tests that leave a deployment as they found it share one cluster and
// one Sentinel setup, started on first use; every test that kills a node
// starts a deployment of its own, so no test depends on the order in which
// the tests run.
//
// The package has tests only.
package clustertest
