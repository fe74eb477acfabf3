//go:build !race

package algo

// raceBuild: see race_test.go.
const raceBuild = false
