package testredis

import (
	"context"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	if got, _ := s.Do("CONFIG", "GET", "save"); got != "save\n" {
		t.Fatalf("persistence must be off, CONFIG GET save = %q", got)
	}
	s.Kill()
	if Ping(s.Addr) == nil {
		t.Fatal("server still answers after Kill")
	}
	s.Restart(t)
	if got, err := s.Do("GET", "k"); err != nil || got != "(nil)" {
		t.Fatalf("after restart GET k = %q, %v; want (nil): data must not survive", got, err)
	}
}

// TestFreezeThaw: a frozen server accepts connections and answers nothing;
// thawed, it answers again with its data; once killed, both are no-ops.
func TestFreezeThaw(t *testing.T) {
	s := Start(t)
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	// A stopped process cannot answer however long it is given; 300 ms
	// only bounds how long the test waits to see that.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	got, err := redisproc.DoContext(ctx, s.Addr, "GET", "k")
	cancel()
	if err == nil {
		t.Errorf("a frozen server answered GET k: %q", got)
	}
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("after Thaw GET k = %q, %v; want v", got, err)
	}
	s.Kill()
	if err := s.Freeze(); err != nil {
		t.Errorf("Freeze after Kill: %v", err)
	}
	if err := s.Thaw(); err != nil {
		t.Errorf("Thaw after Kill: %v", err)
	}
}

// TestCommandCalls: between two looks the server counts the command run
// and what every Do connection costs (HELLO, then PING as rueidis closes
// it), and the looking itself (INFO): nothing else.
func TestCommandCalls(t *testing.T) {
	s := Start(t)
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
	s := Start(t)
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
