package backend_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/stack"
)

func TestMain(m *testing.M) {
	// After a failed connect (TestNewRedisErrorsHidePassword dials a
	// closed port), rueidis keeps one goroutine sleeping out its ~0.5 s
	// reconnect delay; and when a cluster client's first slot map replaces
	// its seed connections, it closes them 5 s later from a goroutine of
	// its own. Both end by themselves.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

// TestNewRedisRejectsBadOptions: a bad option fails NewRedis with a clear
// error, not the first decision later.
func TestNewRedisRejectsBadOptions(t *testing.T) {
	rs := testredis.Start(t)
	for _, tc := range []struct {
		opt  backend.Option
		want string
	}{
		{backend.WithTimeout(0), "timeout must be > 0, got 0s"},
		{backend.WithTimeout(-time.Second), "timeout must be > 0, got -1s"},
		{backend.WithReplicas(0), "replicas must be >= 1, got 0"},
		{backend.WithProbeInterval(0), "probe interval must be > 0, got 0s"},
		{backend.WithLogger(nil), "logger must not be nil"},
		{backend.WithLeaseSize(-1), "lease size must be >= 0, got -1"},
		{nil, "option 0 is nil"},
	} {
		b, err := backend.NewRedis("redis://"+rs.Addr, tc.opt)
		if err == nil {
			b.Close()
			t.Errorf("want %q: NewRedis succeeded", tc.want)
			continue
		}
		if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewRedis = %v, want an invalid-config error saying %q", err, tc.want)
		}
	}
	// Good options: every failure policy's store is ready to decide.
	b, err := backend.NewRedis("redis://"+rs.Addr, backend.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, fp := range []fallback.Policy{fallback.FailOpen, fallback.FailClosed, fallback.LocalFallback} {
		if _, err := b.Store(fp); err != nil {
			t.Errorf("Store(%s): %v", fp, err)
		}
	}
}

// TestNewRedisErrorsHidePassword: neither a URL that does not parse nor a
// Redis that cannot be reached puts the password in the error.
func TestNewRedisErrorsHidePassword(t *testing.T) {
	for _, url := range []string{
		"redis://user:s3cret@host:63x79",  // bad port: url.Parse quotes the URL
		"redis://user:s3cret@[::1:6379/0", // bad host
		"redis://:s3cret@127.0.0.1:1",     // nothing listens on port 1
	} {
		b, err := backend.NewRedis(url)
		if err == nil {
			b.Close()
			t.Fatalf("NewRedis(%s) succeeded", url)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("NewRedis(%s): the password leaks: %v", url, err)
		}
		if !strings.Contains(err.Error(), "redis://") || !strings.Contains(err.Error(), "xxxxx") {
			t.Errorf("NewRedis(%s): want the redacted URL in %q", url, err)
		}
	}
}

// On Redis Cluster each failure policy's front gets a breaker per primary
// (the stack follows the slot map), so a failed primary degrades only its
// keys; on a single Redis, one breaker.
func TestClusterGetsABreakerPerPrimary(t *testing.T) {
	c := testredis.StartCluster(t)
	addrs := c.Addrs()
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	// A deadline a healthy first call (NOSCRIPT, then EVAL) meets on a busy
	// machine: with the 50 ms default it could be degraded.
	b, err := backend.NewRedis(url, backend.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := b.Store(fallback.LocalFallback)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := st.(*stack.Front); !ok || len(f.States()) != 3 {
		t.Errorf("cluster store is %T (%v), want a *stack.Front with a breaker per primary (3)", st, st)
	}
	lim, _ := ratewarden.New(st)
	if r, err := lim.Allow(t.Context(), "user:1", ratewarden.PerMinute(10)); err != nil || !r.Allowed || r.Source != ratewarden.SourceStore {
		t.Errorf("Allow on the cluster: %+v, %v", r, err)
	}

	rs := testredis.Start(t)
	single, err := backend.NewRedis("redis://" + rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	if st, err := single.Store(fallback.LocalFallback); err != nil {
		t.Fatal(err)
	} else if f, ok := st.(*stack.Front); !ok || len(f.States()) != 1 {
		t.Errorf("single-node store is %T (%v), want a *stack.Front with one breaker", st, st)
	}
}

// TestFrontsShareOneDenyCache: the fronts of all failure policies sit on
// one script store and one deny cache, so a denial learned through one is
// answered locally through another.
func TestFrontsShareOneDenyCache(t *testing.T) {
	rs := testredis.Start(t)
	b, err := backend.NewRedis("redis://"+rs.Addr, backend.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	limiter := func(fp fallback.Policy) *ratewarden.Limiter {
		st, err := b.Store(fp)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ratewarden.New(st)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	open, closed := limiter(fallback.FailOpen), limiter(fallback.FailClosed)
	hourly := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Hour}
	for i, want := range []bool{true, false} {
		if r, err := open.Allow(t.Context(), "shared", hourly); err != nil || r.Allowed != want || r.Source != ratewarden.SourceStore {
			t.Fatalf("fail_open check %d: %+v, %v; want Allowed %v from the store", i, r, err, want)
		}
	}
	if r, err := closed.Allow(t.Context(), "shared", hourly); err != nil || r.Allowed || r.Source != ratewarden.SourceCache {
		t.Errorf("fail_closed after fail_open's denial: %+v, %v; want the deny cache's denial", r, err)
	}
	if got := b.Breakers(); len(got) != 3 {
		t.Errorf("Breakers() = %v, want one per failure policy", got)
	}
}

// TestLeaseSize: with leases, two replicas on one Redis admit a hot fixed
// window from leases, never more than its limit and at most a lease each
// fewer; and Close gives a replica's unused units back.
func TestLeaseSize(t *testing.T) {
	rs := testredis.Start(t)
	const size, rate = 10, 100
	// A day's window (epoch-aligned): one ending during the test's
	// milliseconds would give back what the bounds count.
	hot := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: rate, Period: 24 * time.Hour}
	open := func(opts ...backend.Option) (*backend.Redis, *ratewarden.Limiter) {
		t.Helper()
		b, err := backend.NewRedis("redis://"+rs.Addr, append([]backend.Option{backend.WithTimeout(5 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		st, err := b.Store(fallback.FailClosed)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ratewarden.New(st)
		if err != nil {
			t.Fatal(err)
		}
		return b, l
	}
	a, la := open(backend.WithLeaseSize(size))
	b, lb := open(backend.WithLeaseSize(size))
	admitted, leased := 0, 0
	for n := range 3 * rate {
		l := la
		if n%2 == 1 {
			l = lb
		}
		r, err := l.Allow(t.Context(), "tenant", hot)
		if err != nil {
			t.Fatalf("check %d: %v", n, err)
		}
		if r.Allowed {
			admitted++
		}
		if r.Source == ratewarden.SourceLease {
			leased++
		}
	}
	if admitted > rate || admitted < rate-2*size {
		t.Errorf("%d admitted of %d/day by two replicas with leases of %d; want %d to %d", admitted, rate, size, rate-2*size, rate)
	}
	if leased < admitted/2 {
		t.Errorf("%d of %d checks answered from leases; want most", leased, 3*rate)
	}

	// Replica a takes a lease of 10 for 3 checks; its Close gives the 7
	// back, so Redis has 97 left.
	for n := range 3 {
		if r, err := la.Allow(t.Context(), "solo", hot); err != nil || !r.Allowed {
			t.Fatalf("solo check %d: %+v, %v", n, r, err)
		}
	}
	for _, x := range []*backend.Redis{a, b} {
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
	}
	plain, lp := open()
	defer plain.Close()
	r, err := lp.AllowN(t.Context(), "solo", hot, 0) // cost 0: the state
	if err != nil {
		t.Fatal(err)
	}
	if r.Remaining != rate-3 {
		t.Errorf("after Close, Redis has %d left of %d after 3 checks; want %d (the unused leased units back)", r.Remaining, rate, rate-3)
	}
}
