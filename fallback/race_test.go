//go:build race

package fallback

// raceBuild reports whether the tests run with the race detector.
// TestBusyHostNoTrip then runs its replicas from a build without it: a
// race-built check costs several times the CPU, and the replicas' own
// queueing, not the busy machine, would miss the deadline.
const raceBuild = true
