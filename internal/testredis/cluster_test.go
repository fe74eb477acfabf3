package testredis

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestClusterFailoverAndRejoin(t *testing.T) {
	start := time.Now()
	c := StartCluster(t)
	t.Logf("cluster of 6 healthy after %v", time.Since(start).Round(time.Millisecond))

	prims, err := c.Primaries()
	if err != nil || len(prims) != 3 {
		t.Fatalf("Primaries = %v, %v; want 3", prims, err)
	}
	reps, err := c.Replicas()
	if err != nil || len(reps) != 3 {
		t.Fatalf("Replicas = %v, %v; want 3", reps, err)
	}
	for _, p := range prims {
		if slices.Contains(reps, p) {
			t.Fatalf("%s is both primary and replica", p.Addr)
		}
	}

	// Slot lookup agrees with where a write lands: a write sent to any
	// other primary is redirected.
	slot, err := c.Slot("{user:1}:x")
	if err != nil {
		t.Fatal(err)
	}
	if s2, _ := c.Slot("user:1"); s2 != slot {
		t.Fatalf("hash tag ignored: slot %d vs %d", slot, s2)
	}
	owner, err := c.KeyOwner("{user:1}:x")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prims {
		_, err := p.Do("SET", "{user:1}:x", "v")
		if p == owner && err != nil {
			t.Fatalf("SET on the owner %s: %v", p.Addr, err)
		}
		if p != owner && (err == nil || !strings.Contains(err.Error(), "MOVED")) {
			t.Fatalf("SET on %s, not the owner: %v; want MOVED", p.Addr, err)
		}
	}

	// Kill the owner: its replica takes over the slot, and the write
	// survived (it was replicated before the kill).
	if err := owner.WaitReplicated(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	owner.Kill()
	if err := c.WaitHealthy(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("replica promoted %v after the kill", time.Since(killed).Round(time.Millisecond))
	promoted, err := c.SlotOwner(slot)
	if err != nil || promoted == owner {
		t.Fatalf("SlotOwner after failover = %v, %v", promoted, err)
	}
	if got, err := promoted.Do("GET", "{user:1}:x"); err != nil || got != "v" {
		t.Fatalf("GET on the promoted replica = %q, %v; want v", got, err)
	}
	if prims, _ := c.Primaries(); len(prims) != 3 {
		t.Fatalf("%d primaries after failover, want 3", len(prims))
	}

	// The old primary rejoins as a replica: 3 + 3 again.
	if err := c.Rejoin(owner, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	reps, _ = c.Replicas()
	if !slices.Contains(reps, owner) || len(reps) != 3 {
		t.Fatalf("after rejoin, replicas = %v; want 3 including %s", reps, owner.Addr)
	}

	c.Close()
	for _, s := range c.Nodes {
		if Ping(s.Addr) == nil {
			t.Fatalf("%s still answers after Close", s.Addr)
		}
	}
}
