//go:build !race

package fallback

// raceBuild: see race_test.go.
const raceBuild = false
