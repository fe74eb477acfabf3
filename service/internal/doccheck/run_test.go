package doccheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testredis"
)

// Caps, generous for a busy machine: they catch a hang, not slowness.
const (
	runCap   = 2 * time.Minute // one sh block
	goRunCap = 5 * time.Minute // one go block, compiling on a cold cache
	startCap = 5 * time.Minute // a start block until /readyz answers (make run compiles first)
	stopCap  = 30 * time.Second
)

// docEnv is one document's run: its ports, its redis-server and the
// service it started.
type docEnv struct {
	s          *suite
	file       string
	dir        string // scratch space for this document
	tmp        string // TMPDIR of its sh blocks, shown as /tmp
	http, grpc string // 127.0.0.1:port
	redis      *testredis.Server
	srv        *server
}

// runDoc runs the blocks of one document: sh blocks one after the other,
// in document order; go blocks in parallel with each other and with the
// other documents, each on a redis-server of its own.
func (s *suite) runDoc(t *testing.T, file string, blocks []*block) {
	e := &docEnv{s: s, file: file, dir: t.TempDir(), redis: testredis.Start(t)}
	e.tmp = filepath.Join(e.dir, "tmp")
	if err := os.Mkdir(e.tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*string{&e.http, &e.grpc} {
		port, err := testredis.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		*p = "127.0.0.1:" + strconv.Itoa(port)
	}
	defer func() {
		if e.srv != nil {
			if err := e.srv.stop(); err != nil {
				t.Errorf("%s: stopping the service: %v", e.srv.b.where(), err)
			}
		}
	}()
	for _, b := range blocks {
		if b.kind == "skip" {
			t.Logf("%s: skipped: %s", b.where(), b.reason)
			continue
		}
		t.Run(fmt.Sprintf("line%d", b.line), func(t *testing.T) {
			if isGo(b.lang) {
				t.Parallel()
			}
			started := time.Now()
			switch {
			case b.kind == "start":
				e.start(t, b)
			case b.kind == "config":
				e.config(t, b)
			case isGo(b.lang):
				e.goRun(t, b)
			case grpcurlCall(b.body):
				e.grpcurl(t, b)
			default:
				e.shell(t, b)
			}
			t.Logf("%s: %s %s block checked in %v", b.where(), b.kind, b.lang, time.Since(started).Round(time.Millisecond))
		})
	}
}

// rewriter puts real addresses in place of the documented ones, redis
// being the redis-server the block talks to.
func (e *docEnv) rewriter(redis string) *strings.Replacer {
	return strings.NewReplacer(
		"localhost:8080", e.http, "127.0.0.1:8080", e.http,
		"localhost:8081", e.grpc, "127.0.0.1:8081", e.grpc,
		"localhost:6379", redis, "127.0.0.1:6379", redis,
	)
}

// unrewriter puts the documented addresses back into an output.
func (e *docEnv) unrewriter(redis string) *strings.Replacer {
	return strings.NewReplacer(e.http, "127.0.0.1:8080", e.grpc, "127.0.0.1:8081", redis, "127.0.0.1:6379", e.tmp, "/tmp")
}

// shellEnv is the environment of sh blocks: the service's addresses, and
// a temporary directory of the document's own.
func (e *docEnv) shellEnv() []string {
	return cleanEnv([]string{
		"TMPDIR=" + e.tmp,
		"RATEWARDEN_HTTP_ADDR=" + e.http,
		"RATEWARDEN_GRPC_ADDR=" + e.grpc,
		"RATEWARDEN_SERVER=http://" + e.http,
		// The service's deadline per Redis call (50 ms by default): long,
		// so a busy machine does not turn Redis decisions into fallback ones.
		"RATEWARDEN_REDIS_TIMEOUT=10s",
	})
}

// command returns cmd in its own process group, killed as a group when
// ctx ends, with stdout and stderr going to out.
func command(ctx context.Context, dir string, env []string, out *bytes.Buffer, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// exitCode returns the exit status of a finished command, or an error
// when it did not run or did not exit by itself.
func exitCode(err error) (int, error) {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode(), nil
	}
	return -1, err
}

// check compares what a run block printed and its exit status with what
// its document shows.
func (e *docEnv) check(t *testing.T, b *block, out string, code int, un *strings.Replacer) {
	t.Helper()
	if err := e.compare(b, out, code, un); err != nil {
		t.Error(err)
	}
}

// compare is check's verdict as an error.
func (e *docEnv) compare(b *block, out string, code int, un *strings.Replacer) error {
	out = un.Replace(out)
	var errs []error
	if code != b.exit {
		errs = append(errs, fmt.Errorf("%s: exit status %d, the document expects %d", b.where(), code, b.exit))
	}
	if b.hasOut {
		if err := match(b.out, out); err != nil {
			errs = append(errs, fmt.Errorf("%s: the output differs from the one shown at %s:%d: %w", b.where(), b.file, b.outLine, err))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w\nfull output:\n%s", errors.Join(errs...), out)
}

func (e *docEnv) script(t *testing.T, b *block, prelude string) string {
	t.Helper()
	path := filepath.Join(e.dir, fmt.Sprintf("line%d.sh", b.line))
	if err := os.WriteFile(path, []byte(prelude+e.rewriter(e.redis.Addr).Replace(b.body)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// shell runs a sh block with bash from the repository root.
func (e *docEnv) shell(t *testing.T, b *block) {
	path := e.script(t, b, "")
	ctx, cancel := context.WithTimeout(context.Background(), runCap)
	defer cancel()
	var out bytes.Buffer
	code, err := exitCode(command(ctx, e.s.root, e.shellEnv(), &out, "bash", "-e", "-o", "pipefail", path).Run())
	if err != nil {
		t.Fatalf("%s: bash did not finish (cap %v): %v\noutput:\n%s", b.where(), runCap, err, out.String())
	}
	e.check(t, b, out.String(), code, e.unrewriter(e.redis.Addr))
}

// discardRE finds assignments to the blank identifier (x, _ := f(),
// _ = f()), the way snippets drop errors.
var discardRE = regexp.MustCompile(`(?m)^.*(,\s*_\s*:?=|^\s*_\s*(,[^=]*)?:?=).*$`)

// goRun runs a go block as a program, on a redis-server of its own.
func (e *docEnv) goRun(t *testing.T, b *block) {
	if !strings.Contains(b.body, "package main") || !strings.Contains(b.body, "func main()") {
		t.Fatalf("%s: a go run block must be a complete program (package main, func main)", b.where())
	}
	if m := discardRE.FindString(b.body); m != "" {
		t.Errorf("%s: %q discards a result: a program a reader copies checks every error", b.where(), strings.TrimSpace(m))
	}
	dir := filepath.Join(e.dir, fmt.Sprintf("line%d", b.line))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rs := testredis.Start(t)
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, []byte(e.rewriter(rs.Addr).Replace(b.body)), 0o644); err != nil {
		t.Fatal(err)
	}
	module := e.s.root
	if strings.Contains(b.body, `"github.com/ratewarden/ratewarden/service/`) {
		module = filepath.Join(e.s.root, "service")
	}
	env := cleanEnv([]string{"RATEWARDEN_REDIS_URL=redis://" + rs.Addr})
	// One run: its output is the document's or the test fails. (A program
	// whose answer depends on meeting fallback's 50 ms default deadline
	// sets a deadline a busy machine meets, as a reader's laptop may need.)
	ctx, cancel := context.WithTimeout(context.Background(), goRunCap)
	defer cancel()
	var out bytes.Buffer
	code, err := exitCode(command(ctx, module, env, &out, "go", "run", file).Run())
	if err != nil {
		t.Fatalf("%s: go run did not finish (cap %v): %v\noutput:\n%s", b.where(), goRunCap, err, out.String())
	}
	e.check(t, b, out.String(), code, e.unrewriter(rs.Addr))
}

// config validates a yaml block with the ratewarden binary.
func (e *docEnv) config(t *testing.T, b *block) {
	path := filepath.Join(e.dir, fmt.Sprintf("line%d.yaml", b.line))
	if err := os.WriteFile(path, []byte(b.body), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runCap)
	defer cancel()
	var out bytes.Buffer
	code, err := exitCode(command(ctx, e.s.root, e.shellEnv(), &out, e.s.bin, "config", "validate", path).Run())
	if err != nil || code != 0 || !strings.HasPrefix(out.String(), "OK: ") {
		t.Errorf("%s: ratewarden config validate does not accept the configuration (exit %d, %v):\n%s", b.where(), code, err, out.String())
	}
}

// server is a start block running in the background.
type server struct {
	b    *block
	cmd  *exec.Cmd
	log  string // its output, a file (so no pipe outlives it)
	addr string
	done chan error
}

func (srv *server) output() string {
	out, _ := os.ReadFile(srv.log)
	return string(out)
}

// start stops the running service, if any, and runs a start block in the
// background until the service it starts is ready.
func (e *docEnv) start(t *testing.T, b *block) {
	if e.srv != nil {
		if err := e.srv.stop(); err != nil {
			t.Errorf("%s: stopping the service: %v", e.srv.b.where(), err)
		}
		e.srv = nil
	}
	path := e.script(t, b, "")
	logPath := filepath.Join(e.dir, fmt.Sprintf("line%d.log", b.line))
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("bash", "-e", "-o", "pipefail", path)
	cmd.Dir, cmd.Env = e.s.root, e.shellEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	srv := &server{b: b, cmd: cmd, log: logPath, addr: e.http, done: make(chan error, 1)}
	go func() { srv.done <- cmd.Wait() }()
	e.srv = srv

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(startCap)
	for {
		select {
		case err := <-srv.done:
			srv.done <- err
			t.Fatalf("%s: the start block exited before the service was ready (%v):\n%s", b.where(), err, e.unrewriter(e.redis.Addr).Replace(srv.output()))
		default:
		}
		resp, err := client.Get("http://" + e.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the service was not ready within %v (last: %v):\n%s", b.where(), startCap, err, e.unrewriter(e.redis.Addr).Replace(srv.output()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends a start block as Ctrl-C in its terminal would: SIGINT to its
// process group, then waits until the service's port is closed. Only if
// that does not happen within stopCap is the group killed.
func (srv *server) stop() error {
	pgid := srv.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGINT)
	timer := time.NewTimer(stopCap)
	defer timer.Stop()
	select {
	case <-srv.done:
	case <-timer.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-srv.done
		return fmt.Errorf("still running %v after SIGINT; killed:\n%s", stopCap, srv.output())
	}
	for deadline := time.Now().Add(stopCap); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", srv.addr, time.Second)
		if err != nil {
			return nil
		}
		c.Close()
	}
	return fmt.Errorf("%s still accepts connections %v after the start block ended:\n%s", srv.addr, stopCap, srv.output())
}
