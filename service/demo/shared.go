package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
)

// keyPrefix starts every Redis key the demo writes.
const keyPrefix = "ratewarden-demo:"

// shared is the shared state of a demo: a Redis URL, or the HTTP API of
// an in-process ratewarden server.
type shared struct {
	kind     string
	redisURL string // KindRedisServer, KindRedis
	apiURL   string // KindServer: http://127.0.0.1:PORT
	desc     string
}

func (s *shared) label() string {
	switch s.kind {
	case KindServer:
		return "ratewarden server"
	default:
		return "Redis"
	}
}

// startShared picks and starts the shared state: Redis at cfg.RedisURL, a
// redis-server from PATH, or an in-process ratewarden server.
func startShared(ctx context.Context, cfg *Config, rep *Report, cl *cleanup) (*shared, error) {
	if cfg.RedisURL != "" {
		c, err := redisstore.ClientFromURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("demo: --redis: %w", err)
		}
		c.Close() // it connects: the URL works; each replica dials its own
		sh := &shared{kind: KindRedis, redisURL: cfg.RedisURL, desc: "Redis at " + redisstore.RedactURL(cfg.RedisURL)}
		rep.Shared, rep.SharedKind = sh.desc, sh.kind
		return sh, nil
	}
	bin, lookErr := cfg.LookPath("redis-server")
	if lookErr == nil {
		p, err := startRedis(ctx, bin)
		if err != nil {
			return nil, err
		}
		cl.add(p.kill)
		rep.Addrs = append(rep.Addrs, p.addr)
		rep.RedisPID = p.cmd.Process.Pid
		sh := &shared{kind: KindRedisServer, redisURL: "redis://" + p.addr, desc: "redis-server on " + p.addr + " (started by the demo)"}
		rep.Shared, rep.SharedKind = sh.desc, sh.kind
		return sh, nil
	}
	if cfg.Race {
		return nil, ErrNeedsRedis
	}
	b, err := backend.NewMemory()
	if err != nil {
		return nil, err
	}
	cl.add(func() { _ = b.Close() })
	// The demo's clients send inline limits; the policy is there because
	// a configuration without any policy or domain is refused.
	conf, err := config.Parse("demo.yaml", []byte("policies: {unused: 1/1s}\n"))
	if err != nil {
		return nil, fmt.Errorf("demo: server config: %w", err)
	}
	srv, err := server.New(b, server.WithConfig(conf), server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	if err := srv.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("demo: ratewarden server: %w", err)
	}
	cl.add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	rep.Addrs = append(rep.Addrs, srv.HTTPAddr(), srv.GRPCAddr())
	sh := &shared{kind: KindServer, apiURL: "http://" + srv.HTTPAddr(),
		desc: "in-process ratewarden server on " + srv.HTTPAddr() + ", called over its HTTP API (no redis-server on PATH)"}
	rep.Shared, rep.SharedKind = sh.desc, sh.kind
	return sh, nil
}

// stores gives every replica its own connection to the shared limiter:
// a rueidis client and redisstore, or an HTTP client of the API.
func (s *shared) stores(n int) ([]replicaStore, error) {
	out := make([]replicaStore, 0, n)
	for range n {
		if s.kind == KindServer {
			st := newAPIStore(s.apiURL)
			out = append(out, replicaStore{st: st, close: st.close})
			continue
		}
		c, err := redisstore.ClientFromURL(s.redisURL)
		if err != nil {
			closeStores(out)
			return nil, fmt.Errorf("demo: %w", err)
		}
		st, err := redisstore.New(c, redisstore.WithPrefix(keyPrefix))
		if err != nil {
			c.Close()
			closeStores(out)
			return nil, err
		}
		out = append(out, replicaStore{st: st, close: c.Close})
	}
	return out, nil
}

// naiveStores gives every replica its own connection to Redis and the
// naive, non-atomic counter.
func (s *shared) naiveStores(n int) ([]replicaStore, error) {
	if s.redisURL == "" {
		return nil, ErrNeedsRedis
	}
	out := make([]replicaStore, 0, n)
	for range n {
		c, err := redisstore.ClientFromURL(s.redisURL)
		if err != nil {
			closeStores(out)
			return nil, fmt.Errorf("demo: %w", err)
		}
		out = append(out, replicaStore{st: &naiveStore{c: c}, close: c.Close})
	}
	return out, nil
}

// naiveCount reads the naive counter of the client with API key clientKey,
// under the key the middleware gave it.
func (s *shared) naiveCount(ctx context.Context, clientKey string, l ratewarden.Limit) (int, error) {
	r, err := http.NewRequest(http.MethodGet, "/", nil)
	if err != nil {
		return 0, err
	}
	r.Header.Set(clientHeader, clientKey)
	ck, err := httplimit.Header(clientHeader)(r)
	if err != nil {
		return 0, err
	}
	c, err := redisstore.ClientFromURL(s.redisURL)
	if err != nil {
		return 0, fmt.Errorf("demo: %w", err)
	}
	defer c.Close()
	ns := &naiveStore{c: c}
	n, err := c.Do(ctx, c.B().Get().Key(ns.key(httplimit.DefaultRuleName+"|"+ck, l)).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return 0, fmt.Errorf("demo: reading the naive counter: %w", err)
	}
	return int(n), nil
}

// redisStartCap bounds how long a redis-server the demo started gets to
// answer PING.
const redisStartCap = 30 * time.Second

// redisProc is a redis-server the demo started.
type redisProc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{} // closed when the process has exited and been reaped
}

// startRedis starts redis-server on a free loopback port, without
// persistence (it writes no file; its log goes to a small buffer), and
// waits until it answers PING. The process dies with this one (Pdeathsig
// on Linux) and is killed by stop.
func startRedis(ctx context.Context, bin string) (*redisProc, error) {
	var lastErr error
	for range 5 { // a free port may be taken before redis-server binds it
		p, err := tryRedis(ctx, bin)
		if err == nil {
			return p, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("demo: could not start redis-server: %w", lastErr)
}

func tryRedis(ctx context.Context, bin string) (*redisProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "yes",
		"--daemonize", "no",
		"--dir", os.TempDir(),
		"--logfile", "",
	)
	log := &tailBuffer{max: 2000}
	cmd.Stdout, cmd.Stderr = log, log
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &redisProc{cmd: cmd, addr: addr, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	// It answers within milliseconds; the cap is for a busy machine.
	deadline := time.Now().Add(redisStartCap)
	for {
		if err := ping(addr); err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("redis-server exited at start: %s", log)
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within %v: %s", addr, redisStartCap, log)
		}
	}
}

// kill ends the process and waits until it is reaped.
func (p *redisProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping sends PING over a fresh connection and wants +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// naiveStore is the shared counter written the obvious, wrong way: GET the
// count, compare it with the limit in Go, SET count+1 — two round trips
// with nothing between them to stop another replica from reading the same
// count. It only exists to show the race; ratewarden never does this.
type naiveStore struct{ c rueidis.Client }

func (s *naiveStore) key(key string, l ratewarden.Limit) string {
	return keyPrefix + "naive:{" + key + "}:" + l.Scope()
}

// Check implements ratewarden.Store for one limit.
func (s *naiveStore) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if len(req.Limits) != 1 {
		return fmt.Errorf("demo: naive counter: %w: one limit per check", ratewarden.ErrInvalidLimit)
	}
	l := req.Limits[0]
	k := s.key(req.Key, l)
	n, err := s.c.Do(ctx, s.c.B().Get().Key(k).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return fmt.Errorf("demo: naive counter: GET: %w: %w", ratewarden.ErrStoreUnavailable, err)
	}
	capacity := l.Capacity()
	allowed := n+req.Cost <= capacity
	res[0] = ratewarden.Result{Allowed: allowed, Limit: l, Remaining: max(capacity-n, 0)}
	if !allowed {
		res[0].RetryAfter = l.Period
		return nil
	}
	if req.Peek || req.Cost == 0 {
		return nil
	}
	// Another replica may have written since our GET; this SET does not know.
	err = s.c.Do(ctx, s.c.B().Set().Key(k).Value(strconv.FormatInt(n+req.Cost, 10)).Px(l.Period).Build()).Error()
	if err != nil {
		return fmt.Errorf("demo: naive counter: SET: %w: %w", ratewarden.ErrStoreUnavailable, err)
	}
	res[0].Remaining = max(capacity-n-req.Cost, 0)
	return nil
}

// Reset implements ratewarden.Store.
func (s *naiveStore) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	for _, l := range limits {
		if err := s.c.Do(ctx, s.c.B().Del().Key(s.key(key, l)).Build()).Error(); err != nil {
			return fmt.Errorf("demo: naive counter: DEL: %w: %w", ratewarden.ErrStoreUnavailable, err)
		}
	}
	return nil
}

var errNotOK = errors.New("unexpected answer")
