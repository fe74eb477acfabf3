//go:build tools

package peerdiff

// The peer's command, so go.mod and go.sum pin what `go build` needs.
import _ "github.com/envoyproxy/ratelimit/src/service_cmd/runner"
