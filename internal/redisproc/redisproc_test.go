package redisproc

import (
	"context"
	"errors"
	"os/exec"
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

// TestCommandCalls: between two looks the server counts the command run
// and what every Do connection costs (HELLO, then PING as rueidis closes
// it), and the looking itself (INFO): nothing else.
func TestCommandCalls(t *testing.T) {
	s := start(t)
	before, err := s.CommandCalls()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	after, err := s.CommandCalls()
	if err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]int64{"set": 1, "info": 1, "hello": 2} {
		if d := after[cmd] - before[cmd]; d != want {
			t.Errorf("%s: %d calls between the looks, want %d", cmd, d, want)
		}
	}
	// At least the two PINGs of closing; a connection idle for 1 s on a
	// busy machine also gets rueidis' keepalive PING.
	if d := after["ping"] - before["ping"]; d < 2 {
		t.Errorf("ping: %d calls between the looks, want at least 2", d)
	}
	for cmd := range after {
		switch cmd {
		case "set", "info", "hello", "ping":
		default:
			if after[cmd] != before[cmd] {
				t.Errorf("%s: %d calls after, %d before", cmd, after[cmd], before[cmd])
			}
		}
	}
}

// TestInfoIntAndCPU: InfoInt reads a number of INFO, refuses a field that
// is missing or not an integer, and CPU grows as the server works.
func TestInfoIntAndCPU(t *testing.T) {
	s := start(t)
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.InfoInt("keyspace", "db0"); err == nil {
		t.Errorf("InfoInt of db0 (keys=1,expires=0,...): %d, want an error", n)
	}
	if _, err := s.InfoInt("server", "no_such_field"); err == nil {
		t.Error("InfoInt of a missing field: no error")
	}
	pid, err := s.InfoInt("server", "process_id")
	if err != nil || pid <= 0 {
		t.Fatalf("process_id %d, %v", pid, err)
	}
	cpu0, err := s.CPU()
	if err != nil {
		t.Fatal(err)
	}
	// Enough work to show in INFO cpu's microsecond figures.
	if _, err := s.Do("EVAL", "for i = 1, 3000000 do end return 1", "0"); err != nil {
		t.Fatal(err)
	}
	cpu1, err := s.CPU()
	if err != nil {
		t.Fatal(err)
	}
	if cpu1 <= cpu0 {
		t.Errorf("CPU %v after a 3,000,000-step script, %v before", cpu1, cpu0)
	}
}
