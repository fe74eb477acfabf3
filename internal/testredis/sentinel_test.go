package testredis

import (
	"strings"
	"testing"
	"time"
)

func TestSentinelFailover(t *testing.T) {
	start := time.Now()
	d := StartSentinel(t)
	t.Logf("sentinel deployment ready after %v", time.Since(start).Round(time.Millisecond))

	p, err := d.Primary()
	if err != nil || p != d.Data[0] {
		t.Fatalf("Primary = %v, %v; want the first data node", p, err)
	}
	if _, err := p.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReplicated(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Data[1].Do("SET", "k", "w"); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("SET on the replica: %v; want READONLY", err)
	}

	started := time.Now()
	np, err := d.Failover(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SENTINEL FAILOVER done after %v", time.Since(started).Round(time.Millisecond))
	if np != d.Data[1] {
		t.Fatalf("new primary %s, want the replica %s", np.Addr, d.Data[1].Addr)
	}
	if got, err := np.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET on the new primary = %q, %v", got, err)
	}
	if _, err := np.Do("SET", "k", "w"); err != nil {
		t.Fatalf("SET on the new primary: %v", err)
	}
	// The old primary is made a replica of the new one.
	if err := d.WaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("old primary back as a replica %v after the failover", time.Since(started).Round(time.Millisecond))

	d.Close()
	for _, s := range append(d.Data, d.Sentinels...) {
		if Ping(s.Addr) == nil {
			t.Fatalf("%s still answers after Close", s.Addr)
		}
	}
}
