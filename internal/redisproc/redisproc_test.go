package redisproc

import (
	"context"
	"errors"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, opts ...Option) *Server {
	t.Helper()
	s, err := Start(context.Background(), append([]Option{WithDir(t.TempDir())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestDoReplies: every reply shape comes back as the text Do documents,
// and a Redis error as an error carrying Redis' words.
func TestDoReplies(t *testing.T) {
	s := start(t, WithArgs("--maxmemory", "10mb"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "k", "v"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"GET", "missing"}, "(nil)"},
		{[]string{"INCR", "n"}, "1"},
		{[]string{"RPUSH", "l", "a", "b"}, "2"},
		{[]string{"LRANGE", "l", "0", "-1"}, "a\nb"},
		{[]string{"CONFIG", "GET", "save"}, "save\n"},
		{[]string{"CONFIG", "GET", "maxmemory"}, "maxmemory\n10485760"},
		{[]string{"MGET", "k", "missing"}, "v\n(nil)"},
	} {
		if got, err := s.Do(tc.args...); err != nil || got != tc.want {
			t.Errorf("Do(%q) = %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
	if _, err := s.Do("INCR", "k"); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Errorf("INCR on a string: %v, want Redis' error", err)
	}
	for _, args := range [][]string{nil, {""}, {"SUBSCRIBE", "c"}} {
		if _, err := s.Do(args...); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("Do(%q) = %v, want ErrInvalidOption", args, err)
		}
	}
}

// TestKillAndStartAgain: Kill ends the process (reaped, port closed);
// StartAgain brings it back on the same port, empty.
func TestKillAndStartAgain(t *testing.T) {
	s := start(t)
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if pid == 0 || !s.Running() {
		t.Fatalf("PID %d, Running %v for a started server", pid, s.Running())
	}
	s.Kill()
	if s.Running() || s.PID() != 0 || Ping(s.Addr) == nil {
		t.Fatal("the server still runs after Kill")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists after Kill (kill 0: %v)", pid, err)
	}
	s.Kill() // idempotent
	if err := s.StartAgain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "(nil)" {
		t.Fatalf("after StartAgain GET k = %q, %v; want (nil): data must not survive", got, err)
	}
}

func TestStartOptions(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, WithStartTimeout(0)); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "start timeout") {
		t.Errorf("zero start timeout: %v", err)
	}
	if _, err := Start(ctx, nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil option: %v", err)
	}
	falseBin, err := exec.LookPath("false")
	if err != nil {
		t.Fatalf("no false(1) on PATH: %v", err)
	}
	if _, err := Start(ctx, WithBinary(falseBin)); err == nil || !strings.Contains(err.Error(), "redis-server exited at start") {
		t.Errorf("a binary that exits at once: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Start(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled start: %v", err)
	}
}

// TestPingBounded: Ping against an address that accepts and never
// answers gives up (within its 5 s), rather than hanging.
func TestPingBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out bounded pings; make test runs it")
	}
	s := start(t)
	// Longer than Ping waits; the server is killed at the end, paused or not.
	if _, err := s.Do("CLIENT", "PAUSE", "60000", "ALL"); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := Ping(s.Addr); err == nil {
		t.Fatal("PING answered while every client was paused")
	}
	if took := time.Since(begin); took > 15*time.Second {
		t.Errorf("Ping took %v to give up, want about 5 s", took)
	}
}

// TestConfigFile: the config file comes first and sets what the command
// line leaves alone; the command line wins where both set something. A
// path that redis-server would take for an option is refused.
func TestConfigFile(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "redis.conf")
	if err := os.WriteFile(conf, []byte("maxmemory 5mb\nsave 60 1\nhz 11\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, WithConfigFile(conf), WithArgs("--hz", "12"))
	for _, tc := range []struct{ name, want string }{
		{"maxmemory", "5242880"}, // the file's
		{"save", ""},             // the defaults'
		{"hz", "12"},             // WithArgs'
	} {
		if got, err := s.Do("CONFIG", "GET", tc.name); err != nil || got != tc.name+"\n"+tc.want {
			t.Errorf("CONFIG GET %s = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "--port"} {
		if _, err := Start(context.Background(), WithConfigFile(bad)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithConfigFile(%q): %v, want ErrInvalidOption", bad, err)
		}
	}
}

// TestSignal: a stopped server answers nothing until it is continued; once
// killed, Signal sends nothing.
func TestSignal(t *testing.T) {
	s := start(t)
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// A stopped process cannot answer however long it is given; 300 ms
	// only bounds how long the test waits to see that.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := DoContext(ctx, s.Addr, "PING")
	cancel()
	if err == nil {
		t.Error("a server stopped with SIGSTOP answered PING")
	}
	if err := s.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := Ping(s.Addr); err != nil {
		t.Fatalf("after SIGCONT: %v", err)
	}
	s.Kill()
	if err := s.Signal(syscall.SIGCONT); err != nil {
		t.Errorf("Signal after Kill: %v, want nil", err)
	}
}

func TestParseInfoInt(t *testing.T) {
	info := "# Server\r\nprocess_id:42\r\nused_memory:1024\r\nused_memory_human:1.00K\r\ndb0:keys=1,expires=0\r\n"
	for field, want := range map[string]int64{"process_id": 42, "used_memory": 1024} {
		if n, err := ParseInfoInt(info, field); err != nil || n != want {
			t.Errorf("ParseInfoInt(%s) = %d, %v; want %d", field, n, err, want)
		}
	}
	for _, field := range []string{"used_memory_human", "db0", "missing", "used"} {
		if n, err := ParseInfoInt(info, field); err == nil {
			t.Errorf("ParseInfoInt(%s) = %d, want an error", field, n)
		}
	}
}

// TestNoTestCode: programs link this package (the demo in the ratewarden
// binary), so it must not pull in testing or the test harness.
func TestNoTestCode(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if imp == "testing" || strings.Contains(imp, "testredis") || strings.HasPrefix(imp, "testing/") {
			t.Errorf("redisproc imports %s", imp)
		}
	}
}
