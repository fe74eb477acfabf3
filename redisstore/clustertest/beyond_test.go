package clustertest

import (
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestBeyondOnCluster: reservations, settlements, give-backs and permits
// on the 3-primary cluster, through a rueidis and a go-redis cluster
// client, for a key on every primary. Each is one script call on the
// key's primary (all the keys of one call share the caller's hash tag:
// a CROSSSLOT would be an error), and the state lands on that primary.
func TestBeyondOnCluster(t *testing.T) {
	cluster := sharedCluster(t)
	prims, err := cluster.Primaries()
	if err != nil || len(prims) != 3 {
		t.Fatalf("primaries %v, %v", prims, err)
	}
	gc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = gc.Close() })
	gs, err := redisstore.NewGoRedis(gc)
	if err != nil {
		t.Fatal(err)
	}
	stores := map[string]*redisstore.Store{"rueidis": store(t, client(t, clusterURL(cluster))), "go-redis": gs}
	next := 0
	for name, s := range stores {
		for _, p := range prims {
			var key string
			key, next = keyOn(t, cluster, p, "beyond:"+name+":", next)
			beyondOnKey(t, name, s, p, key)
		}
	}
}

// beyondOnKey runs the reservations, the settlement and the permits on
// key, whose primary is p, through s.
func beyondOnKey(t *testing.T, name string, s *redisstore.Store, p *testredis.Server, key string) {
	t.Helper()
	l, err := ratewarden.New(s)
	if err != nil {
		t.Fatal(err)
	}
	at := name + " " + p.Addr
	slow := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Hour, Burst: 1}
	fast := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: 6 * time.Minute} // a scope of its own
	settled := []ratewarden.Limit{
		{Algorithm: ratewarden.SlidingLog, Rate: 1000, Period: time.Hour},
		{Algorithm: ratewarden.TokenBucket, Rate: 1000, Period: 24 * time.Hour},
		{Algorithm: ratewarden.SlidingWindow, Rate: 1000, Period: time.Hour},
	}
	both := []ratewarden.Limit{slow, fast}
	res := make([]ratewarden.Result, 2)
	if err := s.Check(ctx, &ratewarden.Request{Key: key, Limits: both, Cost: 1, MaxDelay: 2 * time.Hour}, res); err != nil || !res[0].Allowed || res[0].Delay != 0 {
		t.Fatalf("%s: first reservation: %+v, %v", at, res, err)
	}
	if err := s.Check(ctx, &ratewarden.Request{Key: key, Limits: both, Cost: 1, MaxDelay: 2 * time.Hour}, res); err != nil || !res[0].Allowed || res[1].Delay < 59*time.Minute {
		t.Fatalf("%s: second reservation: %+v, %v; want admitted an hour ahead (the slow bucket's interval)", at, res, err)
	}
	applied := make([]int64, 2)
	if err := s.Charge(ctx, key, both, []ratewarden.Spent{{Units: -1, Ago: -res[0].ResetAfter}}, applied); err != nil || applied[0] != -1 {
		t.Fatalf("%s: giving the reservation back: applied %v, %v", at, applied, err)
	}

	rv, err := l.Reserve(ctx, key, 100, settled...)
	if err != nil || !rv.Allowed {
		t.Fatalf("%s: Reserve: %+v, %v", at, rv, err)
	}
	if st, err := rv.Settle(ctx, 30); err != nil || !slices.Equal(st.Applied, []int64{-70, -70, -70}) {
		t.Fatalf("%s: Settle(30): %+v, %v; want 70 back on every limit", at, st, err)
	}

	var held []*ratewarden.Permit
	for i := range 3 {
		pm, err := l.Acquire(ctx, key, 2, time.Hour)
		if err != nil || pm.Acquired != (i < 2) {
			t.Fatalf("%s: Acquire %d of 2: %+v, %v", at, i+1, pm, err)
		}
		held = append(held, pm)
	}
	if err := held[0].Extend(ctx, 2*time.Hour); err != nil {
		t.Fatalf("%s: Extend: %v", at, err)
	}
	for _, rk := range []string{s.PermitKey(key), s.Key(key, slow), s.Key(key, fast), s.Key(key, settled[0]), s.Key(key, settled[1]), s.Key(key, settled[2])} {
		if got, err := p.Do("EXISTS", rk); err != nil || got != "1" {
			t.Errorf("%s: %s is not on its primary: %s, %v", at, rk, got, err)
		}
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatalf("%s: Release: %v", at, err)
	}
}
