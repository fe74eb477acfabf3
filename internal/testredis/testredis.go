// Package testredis starts real redis-server processes for tests, on free
// loopback ports with persistence off, and stops them when the test ends.
//
// Tests fail (never skip) when redis-server is not installed: .ci/run
// installs it, and a correctness claim about Redis must run against Redis.
package testredis

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	// Addr is "127.0.0.1:<port>"; it stays the same across Restart.
	Addr string
	Port int

	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start launches a fresh redis-server on a free loopback port with no
// persistence, waits until it answers PING, and registers its shutdown
// with tb.Cleanup. Extra arguments (e.g. "--maxmemory", "10mb") are appended
// to the command line.
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("testredis: redis-server not found on PATH (install it: apt-get install redis-server; .ci/run does): %v", err)
	}
	s, err := startWith(bin, tb.TempDir(), func(port int, dir string) []string {
		return append(serverArgs(port, dir), extra...)
	})
	if err != nil {
		tb.Fatalf("testredis: could not start redis-server: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start(bin string) error {
	cmd := exec.Command(bin, s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(startCap)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return fmt.Errorf("redis-server exited at start (%v): %s", err, s.log())
		default:
		}
		if Ping(s.Addr) == nil {
			// The port was free when chosen, but another test's server
			// may have taken it since: then ours failed to bind, and the
			// PONG is someone else's. Only our own process will do.
			if pid, err := processID(s.Addr); err != nil || pid != cmd.Process.Pid {
				_ = cmd.Process.Kill()
				<-done
				return fmt.Errorf("port %d answered by another redis-server (pid %d, ours %d, %v)", s.Port, pid, cmd.Process.Pid, err)
			}
			s.mu.Lock()
			s.cmd = cmd
			s.mu.Unlock()
			go func() { <-done }() // reap whenever it ends
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("redis-server on %s did not answer PING within %v: %s", s.Addr, startCap, s.log())
}

// Caps on waits for a server process: far above what they take, so that a
// busy machine only makes them slower, never fails them.
const (
	startCap = 30 * time.Second // to answer PING after the start
	killCap  = 30 * time.Second // to stop answering after SIGKILL
	portCap  = 30 * time.Second // for a restart to get its port back
	replyCap = 30 * time.Second // for a reply to Do
	pingCap  = 5 * time.Second  // for a reply to Ping (callers poll it)
)

func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Kill ends the server with SIGKILL, as a crash would, and waits until its
// port stops answering. Data and script cache are gone (no persistence).
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	for deadline := time.Now().Add(killCap); time.Now().Before(deadline) && Ping(s.Addr) == nil; {
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop is Kill; it is safe to call more than once.
func (s *Server) Stop() { s.Kill() }

// Restart starts the server again on the same port, empty (no data, no
// scripts). It kills a running server first.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Kill()
	if err := s.restart(); err != nil {
		tb.Fatalf("testredis: %v", err)
	}
}

// restart starts a killed server again on its port, retrying while the
// port lingers.
func (s *Server) restart() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	var lastErr error
	for deadline := time.Now().Add(portCap); ; {
		if lastErr = s.start(bin); lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("restart on %s, retried for %v: %w", s.Addr, portCap, lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Do sends one command over a fresh connection and returns the reply as
// text (integers and simple strings as is, bulk strings as their content,
// arrays flattened with newlines, nil as "(nil)"). It lets tests inspect
// Redis without depending on the client under test.
func (s *Server) Do(args ...string) (string, error) { return Do(s.Addr, args...) }

// processID returns the process_id INFO server reports at addr.
func processID(addr string) (int, error) {
	info, err := Do(addr, "INFO", "server")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no process_id in INFO server")
}

// Ping returns nil when addr answers PING with PONG (within 5 s).
func Ping(addr string) error {
	r, err := do(addr, pingCap, "PING")
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("PING: %q", r)
	}
	return nil
}

// Do is Server.Do for any address. It waits up to 30 s for the reply.
func Do(addr string, args ...string) (string, error) { return do(addr, replyCap, args...) }

func do(addr string, wait time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	var out []string
	if err := readReply(bufio.NewReader(c), &out); err != nil {
		return "", err
	}
	return strings.Join(out, "\n"), nil
}

func readReply(r *bufio.Reader, out *[]string) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return fmt.Errorf("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		*out = append(*out, line[1:])
	case '-':
		return fmt.Errorf("redis error: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return err
		}
		if n < 0 {
			*out = append(*out, "(nil)")
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		*out = append(*out, string(buf[:n]))
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return err
		}
		for range n {
			if err := readReply(r, out); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// WaitReplicated waits until p's first replica has acknowledged
// everything p wrote: the offset in INFO replication's slave0 line reaches
// master_repl_offset. (WAIT would not do: Do opens a connection per command,
// and WAIT only covers writes made on its own connection.)
func (p *Server) WaitReplicated(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var info string
	for time.Now().Before(deadline) {
		var err error
		if info, err = p.Do("INFO", "replication"); err != nil {
			return err
		}
		var master, replica string
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				master = v
			}
			if v, ok := strings.CutPrefix(line, "slave0:"); ok {
				for _, kv := range strings.Split(v, ",") {
					if o, ok := strings.CutPrefix(kv, "offset="); ok {
						replica = o
					}
				}
			}
		}
		if master != "" && master != "0" && master == replica {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("the write did not reach %s's replica within %v:\n%s", p.Addr, timeout, info)
}

// CommandCalls returns how many times the server has run each command
// since it started (or since CONFIG RESETSTAT), from INFO commandstats,
// keyed by lower-case command name ("evalsha", "get", ...). Commands run
// inside scripts count too.
func (s *Server) CommandCalls() (map[string]int64, error) {
	info, err := s.Do("INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("commandstats %q: %w", line, err)
				}
				m[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return m, nil
}

// ScriptCalls returns how many EVALSHA and EVAL calls the server has run.
func (s *Server) ScriptCalls() (int64, error) {
	m, err := s.CommandCalls()
	return m["evalsha"] + m["eval"], err
}
