//go:build linux

package peerdiff

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// perfRecord is perf(1) recording processes while a measured run lasts
// (PEERDIFF_LOAD_PERF): any language's process, symbols and kernel time
// alike, so both services are profiled the same way.
type perfRecord struct {
	dir, base string
	pids      map[string]int // file name part -> process
	cmds      []*exec.Cmd
}

// startPerf plans recording s, its redis-server and the callers in mode,
// into PEERDIFF_LOAD_PERF's directory (nil when unset). Read a file
// with `perf report -i FILE --no-children --sort dso,symbol`.
func startPerf(t *testing.T, mode string, s *loadService) *perfRecord {
	t.Helper()
	dir := os.Getenv("PEERDIFF_LOAD_PERF")
	if dir == "" {
		return nil
	}
	if _, err := exec.LookPath("perf"); err != nil {
		t.Fatalf("PEERDIFF_LOAD_PERF: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("/", "-", " ", "-", "(", "", ")", "").Replace(s.name)
	p := &perfRecord{dir: dir, base: mode + "-" + name, pids: map[string]int{"service": s.pid, "callers": os.Getpid()}}
	if s.redis != nil {
		p.pids["redis"] = redisPid(t, s.redis)
	}
	return p
}

// begin starts the recorders.
func (p *perfRecord) begin(t *testing.T) {
	t.Helper()
	if p == nil {
		return
	}
	for part, pid := range p.pids {
		out := filepath.Join(p.dir, p.base+"-"+part+".data")
		cmd := exec.Command("perf", "record", "-q", "-F", "997", "-g", "-p", strconv.Itoa(pid), "-o", out)
		if err := cmd.Start(); err != nil {
			t.Fatalf("perf record: %v", err)
		}
		p.cmds = append(p.cmds, cmd)
	}
	time.Sleep(200 * time.Millisecond) // perf attaches
}

// end stops the recorders and waits for them to write their files.
func (p *perfRecord) end(t *testing.T) {
	t.Helper()
	if p == nil {
		return
	}
	for _, cmd := range p.cmds {
		_ = cmd.Process.Signal(syscall.SIGINT)
	}
	for _, cmd := range p.cmds {
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGINT {
			continue // as asked
		}
		if err != nil {
			t.Errorf("perf record %v: %v", cmd.Args, err)
		}
	}
	t.Logf("perf profiles: %s/%s-*.data", p.dir, p.base)
}
