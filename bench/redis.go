// Package bench compares ratewarden's Redis store with other Go rate
// limiters (go-redis/redis_rate, ulule/limiter) and with a bare INCR+PEXPIRE
// script, all against one private redis-server on loopback. It is its own
// module, so the library never depends on its peers.
//
// make bench-peers (cmd/peers) prints the side-by-side tables; go test
// -bench . runs the same cells as Go benchmarks.
package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

// Redis is a private redis-server on a free loopback port, without
// persistence (started by internal/redisproc, the launcher the tests and
// the demo use too). It dies with this process, also when it is killed
// before Stop (a parent-death signal on Linux).
type Redis struct {
	Addr  string
	srv   *redisproc.Server
	admin rueidis.Client
}

// StartRedis starts redis-server (found on PATH) and waits until it answers.
func StartRedis() (*Redis, error) {
	srv, err := redisproc.Start(context.Background(), redisproc.WithArgs("--loglevel", "warning"))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r := &Redis{Addr: srv.Addr, srv: srv}
	r.admin, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.Addr}, DisableCache: true})
	if err != nil {
		r.Stop()
		return nil, fmt.Errorf("bench: admin client: %w", err)
	}
	return r, nil
}

// Stop kills the server.
func (r *Redis) Stop() {
	if r.admin != nil {
		r.admin.Close()
	}
	r.srv.Stop()
}

// FlushAll drops every key (scripts stay loaded).
func (r *Redis) FlushAll(ctx context.Context) error {
	if err := r.admin.Do(ctx, r.admin.B().Flushall().Sync().Build()).Error(); err != nil {
		return fmt.Errorf("bench: FLUSHALL: %w", err)
	}
	return nil
}

// Stats is what one cell reads from INFO before and after it runs.
type Stats struct {
	CPU   float64 // used_cpu_sys + used_cpu_user, seconds
	Calls int64   // commands run, including those inside scripts (total_commands_processed)
}

// Stats reads INFO cpu and stats.
func (r *Redis) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	info, err := r.admin.Do(ctx, r.admin.B().Info().Section("cpu", "stats").Build()).ToString()
	if err != nil {
		return s, fmt.Errorf("bench: INFO: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return s, fmt.Errorf("bench: INFO %s: %w", k, err)
			}
			s.CPU += f
		case "total_commands_processed":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return s, fmt.Errorf("bench: INFO %s: %w", k, err)
			}
			s.Calls = n
		}
	}
	return s, nil
}

// Version returns the server's redis_version and mem_allocator (INFO
// server and memory), or "unknown".
func (r *Redis) Version(ctx context.Context) string {
	info, err := r.admin.Do(ctx, r.admin.B().Info().Section("server", "memory").Build()).ToString()
	if err != nil {
		return "unknown"
	}
	var v, alloc string
	for _, line := range strings.Split(info, "\n") {
		k, val, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "redis_version":
			v = val
		case "mem_allocator":
			alloc = val
		}
	}
	if v == "" {
		return "unknown"
	}
	return "Redis " + v + ", " + alloc
}
