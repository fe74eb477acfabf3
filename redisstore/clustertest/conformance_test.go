package clustertest

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/storetest"
	"github.com/redis/rueidis"
)

func conformance(t *testing.T, c rueidis.Client) {
	storetest.Run(t, func(t *testing.T) storetest.Subject {
		return storetest.Subject{Store: store(t, c), Advance: time.Sleep}
	})
}

// TestConformanceCluster runs the whole suite on the 3+3 cluster, through
// a cluster client seeded with every node.
func TestConformanceCluster(t *testing.T) {
	cluster := sharedCluster(t)
	c := client(t, clusterURL(cluster))
	if _, ok := c.Nodes()[cluster.Nodes[0].Addr]; !ok || len(c.Nodes()) < 3 {
		t.Fatalf("not a cluster client: nodes %v", keys(c.Nodes()))
	}
	conformance(t, c)
}

// TestConformanceSentinel runs the whole suite on the Sentinel setup,
// through a client that asks the sentinels for the primary.
func TestConformanceSentinel(t *testing.T) {
	sentinel := sharedSentinel(t)
	c := client(t, sentinelURL(sentinel))
	p, err := sentinel.Primary()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Nodes()[p.Addr]; !ok {
		t.Fatalf("sentinel client does not talk to the primary %s: nodes %v", p.Addr, keys(c.Nodes()))
	}
	conformance(t, c)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
