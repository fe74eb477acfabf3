package testredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

// Cluster is a real Redis Cluster of 3 primaries and 3 replicas, each a
// redis-server process on 127.0.0.1 with persistence off. Nodes keep their
// index across Kill and Rejoin; which of them are primaries changes with
// failovers (ask Primaries).
type Cluster struct {
	// Nodes are all six nodes, killed ones included.
	Nodes []*Server

	dir string // removed by Close
}

// ClusterNodeTimeout is the cluster-node-timeout of the nodes StartCluster
// starts: a primary that does not answer for this long is suspected, and
// its replica is promoted shortly after the other primaries agree.
const ClusterNodeTimeout = 1000 * time.Millisecond

// clusterCap bounds creating the cluster and its first wait for health.
const clusterCap = 2 * redisproc.DefaultStartTimeout

// StartCluster starts a cluster of 3 primaries and 3 replicas on free
// loopback ports, waits until every node reports cluster_state:ok and every
// replica is in sync, and registers its shutdown with tb.Cleanup. Test
// packages that share one cluster use NewCluster from TestMain instead.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: no Redis Cluster here (a dozen seconds to start); make test starts one")
	}
	c, err := NewCluster()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// NewCluster is StartCluster for callers without a testing.TB (TestMain).
// The nodes live in a new temporary directory, which Close removes. It
// needs redis-cli (to create the cluster) besides redis-server. The caller
// must call Close.
func NewCluster() (c *Cluster, err error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("testredis: redis-cli not found on PATH (install it: apt-get install redis-tools): %w", err)
	}
	c = &Cluster{}
	if c.dir, err = os.MkdirTemp("", "testredis-cluster-"); err != nil {
		return nil, fmt.Errorf("testredis: %w", err)
	}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	for i := range 6 {
		s, err := startClusterNode(filepath.Join(c.dir, "node"+strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterCap)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	dieWithParent(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testredis: redis-cli --cluster create: %w: %s", err, out)
	}
	if err := c.WaitHealthy(clusterCap); err != nil {
		return nil, err
	}
	return c, nil
}

// startClusterNode starts one cluster-enabled node in dir. The cluster bus
// gets a free port of its own (cluster-port), as port+10000 may not exist;
// when that port was taken meanwhile, the node cannot start and gets
// another.
func startClusterNode(dir string) (*Server, error) {
	var lastErr error
	for range 3 {
		bus, err := redisproc.FreePort()
		if err != nil {
			return nil, fmt.Errorf("testredis: %w", err)
		}
		s, err := redisproc.Start(context.Background(), redisproc.WithDir(dir), redisproc.WithArgs(
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // in dir
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout/time.Millisecond)),
			// Promote a replica however long its link was down: tests
			// kill primaries on purpose.
			"--cluster-replica-validity-factor", "0",
		))
		if err == nil {
			return &Server{s}, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("testredis: start cluster node: %w", lastErr)
}

// Close kills every node and removes the cluster's files. It is safe to
// call more than once.
func (c *Cluster) Close() {
	for _, s := range c.Nodes {
		s.Kill()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
	c.dir = ""
}

// Addrs returns the addresses of all nodes, killed ones included (a client
// seeded with them finds the live ones).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr
	}
	return out
}

// ClusterNode is one line of CLUSTER NODES.
type ClusterNode struct {
	ID      string
	Addr    string // 127.0.0.1:port
	Flags   []string
	Primary string // the ID of its primary; "" for a primary
	Slots   [][2]int
}

// Is reports whether the node carries flag (master, slave, fail, fail?,
// myself, handshake, ...).
func (n ClusterNode) Is(flag string) bool { return slices.Contains(n.Flags, flag) }

// SlotCount is the number of slots the node serves.
func (n ClusterNode) SlotCount() int {
	total := 0
	for _, r := range n.Slots {
		total += r[1] - r[0] + 1
	}
	return total
}

// Topology returns CLUSTER NODES as seen by s.
func Topology(s *Server) ([]ClusterNode, error) {
	text, err := s.Do("CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("testredis: CLUSTER NODES on %s: %w", s.Addr, err)
	}
	var nodes []ClusterNode
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("testredis: CLUSTER NODES on %s: short line %q", s.Addr, line)
		}
		n := ClusterNode{ID: f[0], Flags: strings.Split(f[2], ",")}
		n.Addr, _, _ = strings.Cut(f[1], "@")
		if f[3] != "-" {
			n.Primary = f[3]
		}
		for _, sl := range f[8:] {
			if strings.HasPrefix(sl, "[") { // a slot being migrated
				continue
			}
			lo, hi, ok := strings.Cut(sl, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("testredis: CLUSTER NODES on %s: bad slot range %q", s.Addr, sl)
			}
			n.Slots = append(n.Slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// errNoNode says no node of the cluster runs.
var errNoNode = errors.New("testredis: no node of the cluster is running")

// node returns the Server with addr.
func (c *Cluster) node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// view returns the topology as seen by the first running node that
// answers.
func (c *Cluster) view() ([]ClusterNode, error) {
	var lastErr error = errNoNode
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		nodes, err := Topology(s)
		if err == nil {
			return nodes, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// Primaries returns the running primaries that serve slots, ordered by
// their first slot.
func (c *Cluster) Primaries() ([]*Server, error) {
	nodes, err := c.view()
	if err != nil {
		return nil, err
	}
	slices.SortFunc(nodes, func(a, b ClusterNode) int { return firstSlot(a) - firstSlot(b) })
	var out []*Server
	for _, n := range nodes {
		if n.Is("master") && !n.Is("fail") && len(n.Slots) > 0 {
			if s := c.node(n.Addr); s != nil && s.Running() {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

func firstSlot(n ClusterNode) int {
	if len(n.Slots) == 0 {
		return 1 << 30
	}
	return n.Slots[0][0]
}

// Replicas returns the running replicas.
func (c *Cluster) Replicas() ([]*Server, error) {
	nodes, err := c.view()
	if err != nil {
		return nil, err
	}
	var out []*Server
	for _, n := range nodes {
		if n.Is("slave") && !n.Is("fail") {
			if s := c.node(n.Addr); s != nil && s.Running() {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// Slot returns the hash slot of key, as Redis computes it (CLUSTER
// KEYSLOT on a running node).
func (c *Cluster) Slot(key string) (int, error) {
	var lastErr error = errNoNode
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		r, err := s.Do("CLUSTER", "KEYSLOT", key)
		if err != nil {
			lastErr = err
			continue
		}
		return strconv.Atoi(r)
	}
	return 0, lastErr
}

// SlotOwner returns the running primary that serves slot.
func (c *Cluster) SlotOwner(slot int) (*Server, error) {
	nodes, err := c.view()
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if !n.Is("master") || n.Is("fail") {
			continue
		}
		for _, r := range n.Slots {
			if slot >= r[0] && slot <= r[1] {
				if s := c.node(n.Addr); s != nil && s.Running() {
					return s, nil
				}
				return nil, fmt.Errorf("testredis: slot %d: its primary %s is not running", slot, n.Addr)
			}
		}
	}
	return nil, fmt.Errorf("testredis: slot %d: no primary serves it", slot)
}

// KeyOwner returns the running primary that serves key.
func (c *Cluster) KeyOwner(key string) (*Server, error) {
	slot, err := c.Slot(key)
	if err != nil {
		return nil, err
	}
	return c.SlotOwner(slot)
}

// WaitHealthy waits until the cluster is whole again: every running node
// reports cluster_state:ok with all 16384 slots served, every running node
// sees the same running primaries serving all slots, and every running
// replica's link to its primary is up. It returns the last reason it was
// not healthy when timeout passes.
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.healthy()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testredis: cluster not healthy after %v: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) healthy() error {
	var want []string // the running primaries, as the first node sees them
	running := 0
	for _, s := range c.Nodes {
		if s.Running() {
			running++
		}
	}
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		prims, err := c.viewOf(s, running)
		if err != nil {
			return err
		}
		if want == nil {
			want = prims
		} else if !slices.Equal(want, prims) {
			return fmt.Errorf("nodes disagree on the primaries: %v vs %v", want, prims)
		}
	}
	if want == nil {
		return errNoNode
	}
	return nil
}

// viewOf checks the cluster as the running node s sees it (state ok, every
// running node healthy, all slots on running primaries, its own replication
// link up) and returns the primaries it sees, sorted.
func (c *Cluster) viewOf(s *Server, running int) ([]string, error) {
	info, err := s.Do("CLUSTER", "INFO")
	if err != nil {
		return nil, err
	}
	if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
		return nil, fmt.Errorf("%s: CLUSTER INFO: %s", s.Addr, firstLines(info, 3))
	}
	nodes, err := Topology(s)
	if err != nil {
		return nil, err
	}
	var prims []string
	slots, seen := 0, 0
	for _, n := range nodes {
		p := c.node(n.Addr)
		up := p != nil && p.Running()
		if up && !n.Is("fail") && !n.Is("fail?") && !n.Is("handshake") && !n.Is("noaddr") {
			seen++
		}
		if err := c.checkEntry(s, n, up); err != nil {
			return nil, err
		}
		if n.Is("master") && len(n.Slots) > 0 {
			prims = append(prims, n.Addr)
			slots += n.SlotCount()
		}
	}
	slices.Sort(prims)
	if seen != running {
		return nil, fmt.Errorf("%s sees %d of the %d running nodes as healthy", s.Addr, seen, running)
	}
	if slots != 16384 {
		return nil, fmt.Errorf("%s sees %d slots served by running primaries", s.Addr, slots)
	}
	return prims, nil
}

// checkEntry checks one line of s's CLUSTER NODES: a running primary has
// slots, a primary with slots is running and not failing, and when the line
// is s itself as a replica, its link to its primary is up.
func (c *Cluster) checkEntry(s *Server, n ClusterNode, up bool) error {
	if up && n.Is("master") && len(n.Slots) == 0 {
		return fmt.Errorf("%s sees %s as a primary without slots (not a replica yet)", s.Addr, n.Addr)
	}
	if n.Is("master") && len(n.Slots) > 0 {
		if n.Is("fail") || n.Is("fail?") {
			return fmt.Errorf("%s sees primary %s as failing", s.Addr, n.Addr)
		}
		if !up {
			return fmt.Errorf("%s sees %s, which is not running, as a primary", s.Addr, n.Addr)
		}
	}
	if n.Is("myself") && n.Is("slave") {
		repl, err := s.Do("INFO", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("replica %s: link to its primary is not up", s.Addr)
		}
	}
	return nil
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], " ")
}

// Rejoin restarts a killed node on its port with its cluster config: it
// comes back empty and rejoins as a replica (of the primary promoted in its
// place, if it was a primary). Rejoin waits until the cluster is healthy.
func (c *Cluster) Rejoin(s *Server, timeout time.Duration) error {
	if s.Running() {
		return fmt.Errorf("testredis: rejoin %s: it is running", s.Addr)
	}
	if err := s.StartAgain(context.Background()); err != nil {
		return fmt.Errorf("testredis: rejoin: %w", err)
	}
	return c.WaitHealthy(timeout)
}

// DoAll runs one command on every running primary.
func (c *Cluster) DoAll(args ...string) error {
	prims, err := c.Primaries()
	if err != nil {
		return err
	}
	for _, p := range prims {
		if _, err := p.Do(args...); err != nil {
			return fmt.Errorf("testredis: %s: %v: %w", p.Addr, args, err)
		}
	}
	return nil
}
