//go:build race

package algo

// raceBuild reports whether the tests run with the race detector, which
// makes the exhaustive arithmetic checks about ten times slower without
// finding anything more in code that shares no memory: those sample under
// -race, and make test runs them in full without it.
const raceBuild = true
