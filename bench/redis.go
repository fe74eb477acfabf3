// Package bench compares ratewarden's Redis store with other Go rate
// limiters (go-redis/redis_rate, ulule/limiter) and with a bare INCR+PEXPIRE
// script, all against one private redis-server on loopback. It is its own
// module, so the library never depends on its peers.
//
// make bench-peers (cmd/peers) prints the side-by-side tables; go test
// -bench . runs the same cells as Go benchmarks.
package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Redis is a private redis-server on a free loopback port, without
// persistence.
type Redis struct {
	Addr  string
	cmd   *exec.Cmd
	dir   string
	admin rueidis.Client
}

// StartRedis starts redis-server (found on PATH) and waits until it answers.
func StartRedis() (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("bench: redis-server not found on PATH: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "ratewarden-bench-")
	if err != nil {
		return nil, err
	}
	r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
	r.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no",
		"--dir", dir, "--logfile", "", "--loglevel", "warning")
	dieWithParent(r.cmd)
	if err := r.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// Generous: a busy machine can be slow to start a process.
	const startCap = 30 * time.Second
	deadline := time.Now().Add(startCap)
	for {
		err := ping(r.Addr)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			r.Stop()
			return nil, fmt.Errorf("bench: redis-server on %s did not answer PING within %v: %w", r.Addr, startCap, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.admin, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.Addr}, DisableCache: true})
	if err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New("unexpected reply " + line)
	}
	return nil
}

// Stop kills the server and removes its directory.
func (r *Redis) Stop() {
	if r.admin != nil {
		r.admin.Close()
	}
	if r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
	_ = os.RemoveAll(r.dir)
}

// FlushAll drops every key (scripts stay loaded).
func (r *Redis) FlushAll(ctx context.Context) error {
	return r.admin.Do(ctx, r.admin.B().Flushall().Sync().Build()).Error()
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
		return s, err
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
				return s, fmt.Errorf("INFO %s: %w", k, err)
			}
			s.CPU += f
		case "total_commands_processed":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return s, fmt.Errorf("INFO %s: %w", k, err)
			}
			s.Calls = n
		}
	}
	return s, nil
}
