package testredis

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

// ClusterNodeTimeout is the cluster-node-timeout of the nodes StartCluster
// starts: a primary that does not answer for this long is suspected, and
// its replica is promoted shortly after the other primaries agree.
const ClusterNodeTimeout = redisproc.ClusterNodeTimeout

// Cluster is a real Redis Cluster of 3 primaries and 3 replicas (see
// redisproc.Cluster).
type Cluster = redisproc.Cluster

// ClusterNode is one line of CLUSTER NODES.
type ClusterNode = redisproc.ClusterNode

// StartCluster starts a cluster of 3 primaries and 3 replicas on free
// loopback ports, waits until every node reports cluster_state:ok and every
// replica is in sync, and registers its shutdown with tb.Cleanup. Test
// packages that share one cluster use NewCluster from TestMain instead.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := NewCluster()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// NewCluster is StartCluster for callers without a testing.TB (TestMain).
// The caller must call Close.
func NewCluster() (*Cluster, error) {
	c, err := redisproc.NewCluster(context.Background())
	if err != nil {
		return nil, fmt.Errorf("testredis: %w", err)
	}
	return c, nil
}

// Topology returns CLUSTER NODES as seen by s.
func Topology(s *Server) ([]ClusterNode, error) { return redisproc.Topology(s) }
