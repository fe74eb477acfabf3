package bench

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

// TestRedisDiesWithItsParent: when the process that started redis-server
// dies without stopping it (killed, crashed), the server goes too, rather
// than living on as an orphan holding a port.
func TestRedisDiesWithItsParent(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not on PATH")
	}
	// Caps, not expectations: the helper starts a redis-server (up to 30 s
	// on a busy machine) and exits; the server should go at once.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), orphanHelperEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		t.Fatalf("helper said %q", out)
	}
	addr := f[0]
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	// Whatever happens, do not leave the server behind.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	const dieCap = 30 * time.Second
	deadline := time.Now().Add(dieCap)
	for redisproc.Ping(addr) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server (pid %d, %s) still answered %v after the process that started it exited", pid, addr, dieCap)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
