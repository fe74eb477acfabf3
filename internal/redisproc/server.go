// Package redisproc launches one redis-server process on a free loopback
// port, with persistence off, and stops it. It is the launcher the demo,
// the benchmarks (bench) and the test harness (internal/testredis, which
// builds its Cluster and Sentinel deployments out of it) share. It imports
// no test code, so a program can link it.
//
// The process gets a parent-death signal on Linux, so it dies with the
// process that started it, even one killed with SIGKILL. Its log goes to
// memory (the last few kilobytes, shown in start errors), never to a file.
// Start checks that the server answering on the chosen port is the one it
// started, and tries another port when the port was taken meanwhile.
//
// Do, DoContext and Ping talk to any address through rueidis, one fresh
// connection per call, with every wait bounded: the way to look at a
// server without the client under test. ParseInfoInt reads a number out of
// INFO's text.
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
	conf    string // "" unless confSet
	confSet bool
	dir     string
	extra   []string
	timeout time.Duration
}

// WithBinary runs the redis-server at path instead of the one on PATH.
func WithBinary(path string) Option { return func(c *config) { c.bin = path } }

// WithConfigFile passes the config file at path as the server's first
// argument. The command line's options (the defaults, then WithArgs')
// override what it sets, port and persistence included. A sentinel needs
// one (with WithArgs("--sentinel")), writable: it rewrites the file.
func WithConfigFile(path string) Option {
	return func(c *config) { c.conf, c.confSet = path, true }
}

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
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("redisproc: option %d is nil: %w", i, ErrInvalidOption)
		}
		o(c)
	}
	if c.timeout <= 0 {
		return nil, fmt.Errorf("redisproc: start timeout must be positive, got %v: %w", c.timeout, ErrInvalidOption)
	}
	if c.confSet && (c.conf == "" || strings.HasPrefix(c.conf, "-")) {
		// redis-server would read "-..." as an option, not a file.
		return nil, fmt.Errorf("redisproc: config file must be a path not starting with '-', got %q: %w", c.conf, ErrInvalidOption)
	}
	if c.dir == "" {
		c.dir = os.TempDir()
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
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	var lastErr error
	for range portTry {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, bin: c.bin, timeout: c.timeout, log: &tail{max: logBytes}}
		s.args = commandLine(c, port)
		if lastErr = s.start(ctx); lastErr == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("redisproc: could not start redis-server: %w", lastErr)
}

// commandLine is the server's arguments: the config file if any, then a
// loopback port, no persistence, the log on stdout (kept in memory), a
// replica's full sync starting at once (not after the default 5 s of
// waiting for more replicas), then WithArgs'.
func commandLine(c *config, port int) []string {
	var args []string
	if c.conf != "" {
		args = append(args, c.conf)
	}
	args = append(args,
		"--repl-diskless-sync-delay", "0",
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", c.dir,
		"--logfile", "",
	)
	return append(args, c.extra...)
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
			if pid, err := processID(s.Addr); err != nil || pid != int64(cmd.Process.Pid) {
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
func processID(addr string) (int64, error) {
	info, err := Do(addr, "INFO", "server")
	if err != nil {
		return 0, err
	}
	return ParseInfoInt(info, "process_id")
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

// Signal sends sig to the server's process; once the server was killed it
// sends nothing and returns nil. It never reaches another process that
// took over the pid: Kill cannot reap the process meanwhile, and a process
// that exited by itself gives os.ErrProcessDone.
func (s *Server) Signal(sig os.Signal) error {
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

// StartAgain starts the server again on its port with the same command
// line, empty (no data, no scripts), killing it first if it runs. It
// retries while the kernel holds the port, for up to 30 s.
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
