package redisproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// MasterSet is the name the sentinels of NewSentinel monitor.
const MasterSet = "mymaster"

// SentinelDownAfter is the down-after-milliseconds of NewSentinel's
// sentinels: a primary silent for this long is subjectively down.
const SentinelDownAfter = 1000 * time.Millisecond

// Sentinel is a real Sentinel deployment on 127.0.0.1: one primary, one
// replica and three sentinels (quorum 2) monitoring MasterSet.
type Sentinel struct {
	// Data are the two data nodes; Data[0] started as the primary.
	Data []*Server
	// Sentinels are the three sentinel processes.
	Sentinels []*Server

	dir    string
	ownDir bool
}

// NewSentinel starts the deployment and waits until every sentinel knows
// the primary, the replica and the other two sentinels and the replica is
// in sync. Its processes live in a new temporary directory (removed by
// Close), or under WithDir's; WithArgs' arguments go to the data nodes.
// The caller must Close it.
func NewSentinel(ctx context.Context, opts ...Option) (d *Sentinel, err error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	d = &Sentinel{}
	if d.dir, d.ownDir, err = deploymentDir(cfg, "redisproc-sentinel-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	in := func(name string) *config {
		c := *cfg
		c.dir = filepath.Join(d.dir, name)
		return &c
	}
	primary, err := launch(ctx, in("data0"), func(port int) []string {
		return append(serverArgs(port, filepath.Join(d.dir, "data0")), cfg.extra...)
	})
	if err != nil {
		return nil, fmt.Errorf("redisproc: start the primary: %w", err)
	}
	d.Data = append(d.Data, primary)
	replica, err := launch(ctx, in("data1"), func(port int) []string {
		return append(append(serverArgs(port, filepath.Join(d.dir, "data1")), cfg.extra...),
			"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	})
	if err != nil {
		return nil, fmt.Errorf("redisproc: start the replica: %w", err)
	}
	d.Data = append(d.Data, replica)
	for i := range 3 {
		c := in("sentinel" + strconv.Itoa(i))
		s, err := launch(ctx, c, func(port int) []string { return sentinelArgs(c.dir, port, primary.Port) })
		if err != nil {
			return nil, fmt.Errorf("redisproc: start sentinel %d: %w", i, err)
		}
		d.Sentinels = append(d.Sentinels, s)
	}
	if err := d.WaitReady(2 * cfg.timeout); err != nil {
		return nil, err
	}
	return d, nil
}

// sentinelArgs writes a sentinel's config file in dir (Sentinel rewrites
// it, so it must be a writable file) and returns its command line.
func sentinelArgs(dir string, port, primary int) []string {
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
daemonize no
dir %s
logfile ""
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, port, dir, MasterSet, primary, MasterSet, SentinelDownAfter.Milliseconds(), MasterSet, MasterSet)
	// A failed write shows up as the process not starting.
	_ = os.WriteFile(conf, []byte(text), 0o644)
	return []string{conf, "--sentinel"}
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
	if d.ownDir && d.dir != "" {
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
	var lastErr error = errors.New("redisproc: no sentinel is running")
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
		return nil, fmt.Errorf("redisproc: sentinel %s names %q, not a data node", s.Addr, addr)
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
			return fmt.Errorf("redisproc: sentinel deployment not ready after %v: %w", timeout, err)
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
		return nil, fmt.Errorf("redisproc: SENTINEL FAILOVER: %w", err)
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
			return nil, fmt.Errorf("redisproc: no promotion within %v: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
