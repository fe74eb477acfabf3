// Package peerdiff runs ratewarden's gRPC rate limit service and
// envoyproxy/ratelimit side by side, each on a redis-server of its own, on
// the same configs and the same scripted ShouldRateLimit requests, and
// fails on any difference in the answers but the deliberate ones
// docs/service.md lists.
//
// It is a module of its own, so envoyproxy/ratelimit (pinned in go.mod,
// built from the Go module proxy) and its dependencies stay out of the
// service module. Run it with
//
//	cd service/internal/peerdiff && go test -count=1 .
package peerdiff
