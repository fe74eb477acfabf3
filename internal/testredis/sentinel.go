package testredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

// MasterSet is the name the sentinels of StartSentinel monitor.
const MasterSet = "mymaster"

// SentinelDownAfter is the down-after-milliseconds of StartSentinel's
// sentinels: a primary silent for this long is subjectively down.
const SentinelDownAfter = 1000 * time.Millisecond

// Sentinel is a real Sentinel deployment on 127.0.0.1: one primary, one
// replica and three sentinels (quorum 2) monitoring MasterSet.
type Sentinel struct {
	// Data are the two data nodes; Data[0] started as the primary.
	Data []*Server
	// Sentinels are the three sentinel processes.
	Sentinels []*Server

	dir string // removed by Close
}

// StartSentinel starts the deployment, waits until every sentinel knows
// the primary, the replica and the other two sentinels and the replica is
// in sync, and registers its shutdown with tb.Cleanup. TestMain uses
// NewSentinel.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: no Sentinel deployment here; make test starts one")
	}
	s, err := NewSentinel()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// NewSentinel is StartSentinel for callers without a testing.TB. Its
// processes live in a new temporary directory, which Close removes. The
// caller must call Close.
func NewSentinel() (d *Sentinel, err error) {
	d = &Sentinel{}
	if d.dir, err = os.MkdirTemp("", "testredis-sentinel-"); err != nil {
		return nil, fmt.Errorf("testredis: %w", err)
	}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	ctx := context.Background()
	primary, err := redisproc.Start(ctx, redisproc.WithDir(filepath.Join(d.dir, "data0")))
	if err != nil {
		return nil, fmt.Errorf("testredis: start the primary: %w", err)
	}
	d.Data = append(d.Data, &Server{primary})
	replica, err := redisproc.Start(ctx, redisproc.WithDir(filepath.Join(d.dir, "data1")),
		redisproc.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)))
	if err != nil {
		return nil, fmt.Errorf("testredis: start the replica: %w", err)
	}
	d.Data = append(d.Data, &Server{replica})
	for i := range 3 {
		s, err := startSentinel(filepath.Join(d.dir, "sentinel"+strconv.Itoa(i)), primary.Port)
		if err != nil {
			return nil, fmt.Errorf("testredis: start sentinel %d: %w", i, err)
		}
		d.Sentinels = append(d.Sentinels, s)
	}
	if err := d.WaitReady(2 * redisproc.DefaultStartTimeout); err != nil {
		return nil, err
	}
	return d, nil
}

// startSentinel starts a sentinel in dir monitoring the primary on port.
// Its config file must be a writable file: Sentinel rewrites it. Port,
// bind address and the rest come from the launcher's command line.
func startSentinel(dir string, primary int) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d 2
sentinel down-after-milliseconds %[1]s %[3]d
sentinel failover-timeout %[1]s 5000
sentinel parallel-syncs %[1]s 1
`, MasterSet, primary, SentinelDownAfter.Milliseconds())
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	s, err := redisproc.Start(context.Background(), redisproc.WithDir(dir),
		redisproc.WithConfigFile(conf), redisproc.WithArgs("--sentinel"))
	if err != nil {
		return nil, err
	}
	return &Server{s}, nil
}

// Close kills every process and removes the deployment's files. It is
// safe to call more than once.
func (d *Sentinel) Close() {
	for _, s := range d.Sentinels {
		s.Kill()
	}
	for _, s := range d.Data {
		s.Kill()
	}
	if d.dir != "" {
		_ = os.RemoveAll(d.dir)
	}
	d.dir = ""
}

// SentinelAddrs returns the sentinels' addresses (a client's
// InitAddress).
func (d *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(d.Sentinels))
	for i, s := range d.Sentinels {
		out[i] = s.Addr
	}
	return out
}

// Primary returns the data node the sentinels name as the primary now
// (SENTINEL GET-MASTER-ADDR-BY-NAME on the first running sentinel that
// answers).
func (d *Sentinel) Primary() (*Server, error) {
	var lastErr error = errors.New("testredis: no sentinel is running")
	for _, s := range d.Sentinels {
		if !s.Running() {
			continue
		}
		r, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterSet)
		if err != nil {
			lastErr = err
			continue
		}
		host, port, _ := strings.Cut(r, "\n")
		addr := host + ":" + port
		for _, n := range d.Data {
			if n.Addr == addr {
				return n, nil
			}
		}
		return nil, fmt.Errorf("testredis: sentinel %s names %q, not a data node", s.Addr, addr)
	}
	return nil, lastErr
}

// WaitReady waits until every running sentinel names the same running
// primary, knows one replica and the other running sentinels, and that
// primary has a replica in sync.
func (d *Sentinel) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := d.ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testredis: sentinel deployment not ready after %v: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *Sentinel) ready() error {
	running := 0
	for _, s := range d.Sentinels {
		if s.Running() {
			running++
		}
	}
	var primary string
	for _, s := range d.Sentinels {
		if !s.Running() {
			continue
		}
		r, err := s.Do("SENTINEL", "MASTER", MasterSet)
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", s.Addr, err)
		}
		f := fields(r)
		addr := f["ip"] + ":" + f["port"]
		switch {
		case primary == "":
			primary = addr
		case addr != primary:
			return fmt.Errorf("sentinels disagree on the primary: %s vs %s", primary, addr)
		}
		if strings.Contains(f["flags"], "down") {
			return fmt.Errorf("sentinel %s: primary %s flagged %s", s.Addr, addr, f["flags"])
		}
		if f["num-slaves"] != "1" || f["num-other-sentinels"] != strconv.Itoa(running-1) {
			return fmt.Errorf("sentinel %s: %s replicas, %s other sentinels", s.Addr, f["num-slaves"], f["num-other-sentinels"])
		}
	}
	var p *Server
	for _, n := range d.Data {
		if n.Addr == primary {
			p = n
		}
	}
	if p == nil || !p.Running() {
		return fmt.Errorf("the named primary %q is not a running data node", primary)
	}
	repl, err := p.Do("INFO", "replication")
	if err != nil {
		return err
	}
	if !strings.Contains(repl, "role:master") || !strings.Contains(repl, "connected_slaves:1") || !strings.Contains(repl, "state=online") {
		return fmt.Errorf("primary %s: replica not online: %s", p.Addr, firstLines(repl, 4))
	}
	return nil
}

// fields turns a flat name/value reply ("name\nvalue\n...") into a map.
func fields(r string) map[string]string {
	parts := strings.Split(r, "\n")
	m := make(map[string]string, len(parts)/2)
	for i := 0; i+1 < len(parts); i += 2 {
		m[parts[i]] = parts[i+1]
	}
	return m
}

// Failover asks the sentinels for a failover (SENTINEL FAILOVER) and waits
// until every running sentinel names the other data node as the primary
// and that node accepts writes. It does not wait for the old primary to
// become a replica: sentinels reconfigure it about 10 s later (WaitReady
// waits for that).
func (d *Sentinel) Failover(timeout time.Duration) (*Server, error) {
	old, err := d.Primary()
	if err != nil {
		return nil, err
	}
	if _, err := d.Sentinels[0].Do("SENTINEL", "FAILOVER", MasterSet); err != nil {
		return nil, fmt.Errorf("testredis: SENTINEL FAILOVER: %w", err)
	}
	return d.WaitPromoted(old, timeout)
}

// promoted returns the primary every running sentinel names, when it is
// not old and says role:master.
func (d *Sentinel) promoted(old *Server) (*Server, error) {
	var p *Server
	for _, s := range d.Sentinels {
		if !s.Running() {
			continue
		}
		r, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterSet)
		if err != nil {
			return nil, err
		}
		host, port, _ := strings.Cut(r, "\n")
		if p != nil && p.Addr != host+":"+port {
			return nil, fmt.Errorf("sentinels disagree: %s vs %s:%s", p.Addr, host, port)
		}
		for _, n := range d.Data {
			if n.Addr == host+":"+port {
				p = n
			}
		}
		if p == nil {
			return nil, fmt.Errorf("sentinel %s names %s:%s, not a data node", s.Addr, host, port)
		}
	}
	if p == nil || p == old {
		return nil, fmt.Errorf("the primary is still %v", old.Addr)
	}
	repl, err := p.Do("INFO", "replication")
	if err != nil {
		return nil, err
	}
	if !strings.Contains(repl, "role:master") {
		return nil, fmt.Errorf("%s named primary but not role:master yet", p.Addr)
	}
	return p, nil
}

// WaitPromoted waits until every running sentinel names a data node other
// than old as the primary, and that node says role:master — after old was
// killed, say. It returns the new primary.
func (d *Sentinel) WaitPromoted(old *Server, timeout time.Duration) (*Server, error) {
	deadline := time.Now().Add(timeout)
	for {
		p, err := d.promoted(old)
		if err == nil {
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("testredis: no promotion within %v: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
