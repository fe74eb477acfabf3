// Package redisproc starts real redis-server processes on free loopback
// ports, with persistence off, and stops them: one server (Start), a Redis
// Cluster of 3 primaries and 3 replicas (NewCluster), or a Sentinel
// deployment (NewSentinel). Tests reach it through internal/testredis,
// which adds testing.TB wrappers and a fault proxy; the demo and the
// benchmarks use it directly.
//
// Every process gets a parent-death signal on Linux, so it dies with the
// process that started it, even one killed with SIGKILL. A server's log
// goes to memory (the last few kilobytes, shown in start errors), never
// to a file.
//
// Do and Ping talk to any address through rueidis, one fresh connection
// per call, with every wait bounded: the tool to inspect a server without
// the client under test, also while faults are injected.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrInvalidOption is wrapped by the errors of Start for an option out of
// range.
var ErrInvalidOption = errors.New("invalid option")

// Caps on waits for a server process: far above what they take, so that a
// busy machine only makes them slower, never fails them.
const (
	// DefaultStartTimeout is how long Start waits for PONG by default.
	DefaultStartTimeout = 30 * time.Second

	killCap  = 30 * time.Second // to stop answering after SIGKILL
	portCap  = 30 * time.Second // for a restart to get its port back
	reapCap  = 2 * time.Second  // for a killed process' output to end (a forked child may hold it)
	portTry  = 5                // free ports tried when one is taken meanwhile
	logBytes = 2000             // log kept for error messages
)

// Option configures Start.
type Option func(*config)

type config struct {
	bin     string
	dir     string
	extra   []string
	timeout time.Duration
}

// WithBinary runs the redis-server at path instead of the one on PATH.
func WithBinary(path string) Option { return func(c *config) { c.bin = path } }

// WithDir makes dir the server's working directory (created if missing),
// where a replica keeps the copy it syncs and a cluster node its
// nodes.conf. The default is os.TempDir(): a standalone server without
// persistence writes nothing there.
func WithDir(dir string) Option { return func(c *config) { c.dir = dir } }

// WithArgs appends arguments to the command line (e.g. "--maxmemory",
// "10mb"); they override the defaults, which come first.
func WithArgs(args ...string) Option {
	return func(c *config) { c.extra = append(c.extra, args...) }
}

// WithStartTimeout bounds the wait for the new server to answer PING
// (DefaultStartTimeout unless given; it must be positive).
func WithStartTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// newConfig applies opts and validates the result, finding redis-server on
// PATH unless WithBinary named one.
func newConfig(opts []Option) (*config, error) {
	c := &config{timeout: DefaultStartTimeout}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("redisproc: nil Option: %w", ErrInvalidOption)
		}
		o(c)
	}
	if c.timeout <= 0 {
		return nil, fmt.Errorf("redisproc: start timeout must be positive, got %v: %w", c.timeout, ErrInvalidOption)
	}
	if c.bin == "" {
		bin, err := LookPath()
		if err != nil {
			return nil, err
		}
		c.bin = bin
	}
	return c, nil
}

// LookPath finds redis-server on PATH, with an error saying how to install
// it.
func LookPath() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redisproc: redis-server not found on PATH (install it: apt-get install redis-server; .ci/run does): %w", err)
	}
	return bin, nil
}

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	// Addr is "127.0.0.1:<port>"; it stays the same across restarts.
	Addr string
	Port int

	bin     string
	args    []string
	timeout time.Duration
	log     *tail

	mu   sync.Mutex
	proc *process // nil once killed
}

// process is one run of the server's command.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited and been reaped
}

// Start launches a redis-server on a free loopback port with no
// persistence and waits until it answers PING (trying other ports when the
// chosen one was taken meanwhile). It stops early when ctx is done. The
// caller must Kill (or Stop) it.
func Start(ctx context.Context, opts ...Option) (*Server, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.dir == "" {
		c.dir = os.TempDir()
	}
	s, err := launch(ctx, c, func(port int) []string { return append(serverArgs(port, c.dir), c.extra...) })
	if err != nil {
		return nil, fmt.Errorf("redisproc: could not start redis-server: %w", err)
	}
	return s, nil
}

// serverArgs is the command line every redis-server here starts with: a
// loopback port, no persistence, the log on stdout (kept in memory), and a
// replica's full sync starting at once (not after the default 5 s of
// waiting for more replicas).
func serverArgs(port int, dir string) []string {
	return []string{
		"--repl-diskless-sync-delay", "0",
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", "",
	}
}

// launch starts a server in c.dir with the command line args gives for a
// free port, trying other ports when one was taken meanwhile.
func launch(ctx context.Context, c *config, args func(port int) []string) (*Server, error) {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for range portTry {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, bin: c.bin, timeout: c.timeout, log: &tail{max: logBytes}}
		s.args = args(port)
		if lastErr = s.start(ctx); lastErr == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisproc: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// errExited marks a process that ended before it answered.
var errExited = errors.New("redis-server exited at start")

func (s *Server) start(ctx context.Context) error {
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.WaitDelay = reapCap
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(s.timeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%w (%v): %s", errExited, cmd.ProcessState, s.Log())
		default:
		}
		if Ping(s.Addr) == nil {
			// The port was free when chosen, but another server may have
			// taken it since: then ours failed to bind, and the PONG is
			// someone else's. Only our own process will do.
			if pid, err := processID(s.Addr); err != nil || pid != cmd.Process.Pid {
				p.kill()
				return fmt.Errorf("port %d answered by another redis-server (pid %d, ours %d, %v)", s.Port, pid, cmd.Process.Pid, err)
			}
			s.mu.Lock()
			s.proc = p
			s.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("redis-server on %s did not answer PING within %v: %s", s.Addr, s.timeout, s.Log())
		}
		select {
		case <-ctx.Done():
			p.kill()
			return ctx.Err()
		case <-p.done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// kill ends the process and waits until it is reaped.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// processID returns the process_id INFO server reports at addr.
func processID(addr string) (int, error) {
	info, err := Do(addr, "INFO", "server")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("no process_id in INFO server")
}

// PID returns the process id of the running server, 0 once it was killed.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Running reports whether the server's process is running (it was not
// killed).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Log returns the end of what the server logged.
func (s *Server) Log() string { return s.log.String() }

// Kill ends the server with SIGKILL, as a crash would, waits until the
// process is reaped and its port stops answering. Data and script cache
// are gone (no persistence). It is safe to call more than once.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	p.kill()
	for deadline := time.Now().Add(killCap); time.Now().Before(deadline) && Ping(s.Addr) == nil; {
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop is Kill.
func (s *Server) Stop() { s.Kill() }

// StartAgain starts the server again on its port, empty (no data, no
// scripts), killing it first if it runs. It retries while the kernel holds
// the port, for up to 30 s.
func (s *Server) StartAgain(ctx context.Context) error {
	s.Kill()
	var lastErr error
	for deadline := time.Now().Add(portCap); ; {
		if lastErr = s.start(ctx); lastErr == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("redisproc: restart on %s, retried for %v: %w", s.Addr, portCap, lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TB is the part of testing.TB that Restart uses (this package does not
// import testing, so that programs can use it).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Restart is StartAgain for a test: it fails tb when the server does not
// come back.
func (s *Server) Restart(tb TB) {
	tb.Helper()
	if err := s.StartAgain(context.Background()); err != nil {
		tb.Fatalf("%v", err)
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// Freeze stops the server's process (SIGSTOP): connections stay open and
// accept bytes, nothing is answered, as on a host that stalls. Thaw
// resumes it. Both are no-ops once the server was killed.
func (s *Server) Freeze() error { return s.signal(syscall.SIGSTOP) }

// Thaw resumes a server stopped by Freeze (SIGCONT).
func (s *Server) Thaw() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redisproc: signal %v to %s: %w", sig, s.Addr, err)
	}
	return nil
}
