package denycache_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/denycache"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/redis/rueidis"
)

// scriptCalls is the number of EVALSHA and EVAL calls srv has served, from
// INFO commandstats.
func scriptCalls(t testing.TB, srv *testredis.Server) int64 {
	t.Helper()
	n, err := srv.ScriptCalls()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	return n
}

func newRedisStore(t testing.TB, srv *testredis.Server, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, err := redisstore.New(c, opts...) // the script store alone: the cache under test wraps it
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// flood runs goroutines × perG Allow calls on one key through st and
// returns the admitted and the cached counts.
func flood(t *testing.T, st ratewarden.Store, key string, lim ratewarden.Limit, goroutines, perG int) (admitted, cached int64) {
	t.Helper()
	l, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var a, c atomic.Int64
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range perG {
				r, err := l.Allow(context.Background(), key, lim)
				if err != nil {
					errs <- err
					return
				}
				if r.Allowed {
					a.Add(1)
				}
				if r.Source == ratewarden.SourceCache {
					c.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return a.Load(), c.Load()
}

// TestHotKeyFloodRedis: 64 goroutines flood one key limited to 100 (per
// hour for a fixed window, per day for a token bucket: no token comes back
// during the test), against a real redis-server, with and without the deny
// cache, batched and not. Both admit exactly 100; with the cache, the
// script calls per rejected request fall at least tenfold, and the
// denials that reach Redis are at most one per goroutine: the checks in
// flight when the first denial is remembered (the gate lets through what
// the last answer said was left, which concurrent checks may have taken
// since), after which every check is answered locally.
func TestHotKeyFloodRedis(t *testing.T) {
	srv := testredis.Start(t)
	const goroutines, perG = 64, 200
	for _, tc := range []struct {
		lim      ratewarden.Limit
		batching bool
	}{
		{ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour}, true},
		{ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: 24 * time.Hour}, true},
		// Unbatched, as on a Cluster: every check is a script call of its
		// own, and without the cache's gate about 140 were in flight
		// before the first denial came back.
		{ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour}, false},
	} {
		lim := tc.lim
		name := lim.Algorithm.String()
		if !tc.batching {
			name += "/unbatched"
		}
		t.Run(name, func(t *testing.T) {
			// A run that straddles the fixed window's epoch-aligned end
			// gets a second window: run again then, on fresh keys.
			for try := 0; ; try++ {
				suffix := name + ":" + strconv.Itoa(try)
				start := time.Now()
				plain := newRedisStore(t, srv, redisstore.WithBatching(tc.batching))
				before := scriptCalls(t, srv)
				plainAdmitted, _ := flood(t, plain, "plain:"+suffix, lim, goroutines, perG)
				plainCalls := scriptCalls(t, srv) - before

				dc, err := denycache.New(newRedisStore(t, srv, redisstore.WithBatching(tc.batching)))
				if err != nil {
					t.Fatal(err)
				}
				before = scriptCalls(t, srv)
				admitted, cached := flood(t, dc, "cached:"+suffix, lim, goroutines, perG)
				cacheCalls := scriptCalls(t, srv) - before
				if lim.Algorithm == ratewarden.FixedWindow && !time.Now().Truncate(lim.Period).Equal(start.Truncate(lim.Period)) && try < 2 {
					t.Logf("run %d straddled a window boundary; again", try)
					continue
				}
				if plainAdmitted != 100 {
					t.Fatalf("plain: admitted %d, want 100", plainAdmitted)
				}
				if admitted != 100 {
					t.Fatalf("with the deny cache: admitted %d, want 100", admitted)
				}
				rejected := float64(goroutines*perG - 100)
				perPlain, perCache := float64(plainCalls)/rejected, float64(cacheCalls)/rejected
				t.Logf("%s: %d requests, 100 admitted; script calls: plain %d (%.4f per rejected), with the deny cache %d (%.4f per rejected, %d answered locally)",
					lim, goroutines*perG, plainCalls, perPlain, cacheCalls, perCache, cached)
				if cacheCalls == 0 || perPlain < 10*perCache || cacheCalls > 100+goroutines {
					t.Errorf("script calls per rejected request: plain %.4f, with the cache %.4f (%d calls): want at least 10x fewer, and at most %d calls (100 admissions and a denial per goroutine)", perPlain, perCache, cacheCalls, 100+goroutines)
				}
				return
			}
		})
	}
}

// BenchmarkFloodRedis: parallel goroutines flood one key that is over its
// limit (1 per hour), on a real redis-server, with and without the cache.
func BenchmarkFloodRedis(b *testing.B) {
	srv := testredis.Start(b)
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Hour}
	run := func(b *testing.B, st ratewarden.Store, key string) {
		lm, err := ratewarden.New(st)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := lm.Allow(context.Background(), key, lim); err != nil { // the one admission
			b.Fatal(err)
		}
		before := scriptCalls(b, srv)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if r, err := lm.Allow(context.Background(), key, lim); err != nil || r.Allowed {
					b.Errorf("%+v, %v", r, err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(scriptCalls(b, srv)-before)/float64(b.N), "calls/op")
	}
	b.Run("plain", func(b *testing.B) { run(b, newRedisStore(b, srv), "plain") })
	b.Run("denycache", func(b *testing.B) {
		dc, err := denycache.New(newRedisStore(b, srv))
		if err != nil {
			b.Fatal(err)
		}
		run(b, dc, "cached")
	})
}
