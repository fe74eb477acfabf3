package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/redisstore"
)

// perHour is the end-to-end limit. SlidingLog is exact and has no window
// boundary, and no request leaves the log within the hour, however slowly
// the machine serves the test's few hundred requests.
var perHour = ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 100, Period: time.Hour}

const e2eRequests = 300

type e2eReply struct {
	status  int
	replica string
	header  http.Header
}

// runReplicas serves one middleware-wrapped handler per store (a replica
// each, on its own loopback httptest server) behind a round-robin
// httputil.ReverseProxy, sends e2eRequests sequential requests from one
// client through the proxy and returns the replies in order.
func runReplicas(t *testing.T, stores []ratewarden.Store) []e2eReply {
	return runReplicasConcurrently(t, stores, 1)
}

// runReplicasConcurrently is runReplicas with the requests sent by workers
// goroutines; the replies are then in no particular order.
func runReplicasConcurrently(t *testing.T, stores []ratewarden.Store, workers int) []e2eReply {
	t.Helper()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	key, err := httplimit.ClientIP(httplimit.IPConfig{TrustedProxies: loopback})
	if err != nil {
		t.Fatal(err)
	}
	var backends []*url.URL
	for i, st := range stores {
		lim, err := ratewarden.New(st)
		if err != nil {
			t.Fatal(err)
		}
		m := mustNew(t, lim, httplimit.WithLimits(perHour), httplimit.WithKey(key))
		name := strconv.Itoa(i)
		srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Replica", name)
			_, _ = io.WriteString(w, "ok")
		})))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		backends = append(backends, u)
	}
	var next atomic.Uint64
	proxyTransport := &http.Transport{}
	t.Cleanup(proxyTransport.CloseIdleConnections)
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(backends[(next.Add(1)-1)%uint64(len(backends))])
			pr.SetXForwarded()
		},
		Transport: proxyTransport,
	})
	t.Cleanup(proxy.Close)

	clientTransport := &http.Transport{}
	t.Cleanup(clientTransport.CloseIdleConnections)
	// A cap for a hung request, far above what one takes on a busy machine.
	c := &http.Client{Transport: clientTransport, Timeout: time.Minute}
	replies := make([]e2eReply, e2eRequests)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < e2eRequests; i += workers {
				resp, err := c.Get(proxy.URL + "/api")
				if err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				replies[i] = e2eReply{resp.StatusCode, resp.Header.Get("X-Replica"), resp.Header}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return replies
}

func newRedisStore(t *testing.T, addr string) ratewarden.Store {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Three replicas, each with its own Redis client, share one redis-server:
// 100 per hour means 100 in total.
func TestEndToEndReplicasShareOneRedis(t *testing.T) {
	srv := testredis.Start(t)
	stores := []ratewarden.Store{newRedisStore(t, srv.Addr), newRedisStore(t, srv.Addr), newRedisStore(t, srv.Addr)}
	replies := runReplicas(t, stores)

	var allowed, denied int
	perReplica := map[string]int{}
	for i, r := range replies {
		h := r.header
		if got := h.Get("RateLimit-Policy"); got != `"100/1h sliding_log";q=100;w=3600` {
			t.Errorf("reply %d: RateLimit-Policy %q", i, got)
		}
		if h.Get("X-RateLimit-Limit") != "100" {
			t.Errorf("reply %d: X-RateLimit-Limit %q", i, h.Get("X-RateLimit-Limit"))
		}
		switch r.status {
		case http.StatusOK:
			allowed++
			perReplica[r.replica]++
			// Sequential requests: the i-th admitted one leaves 99-i, counted
			// across all replicas.
			want := strconv.Itoa(99 - i)
			if h.Get("X-RateLimit-Remaining") != want || !strings.HasPrefix(h.Get("RateLimit"), `"100/1h sliding_log";r=`+want+";t=") {
				t.Errorf("reply %d: remaining %q, RateLimit %q; want %s", i, h.Get("X-RateLimit-Remaining"), h.Get("RateLimit"), want)
			}
			if h.Get("Retry-After") != "" {
				t.Errorf("reply %d: Retry-After on a 200", i)
			}
		case http.StatusTooManyRequests:
			denied++
			if i < 100 {
				t.Errorf("reply %d denied before the limit was used up", i)
			}
			ra, err := strconv.Atoi(h.Get("Retry-After"))
			if err != nil || ra < 1 || ra > 3600 {
				t.Errorf("reply %d: Retry-After %q, want 1..3600", i, h.Get("Retry-After"))
			}
			rl := h.Get("RateLimit")
			if h.Get("X-RateLimit-Remaining") != "0" || !strings.HasPrefix(rl, `"100/1h sliding_log";r=0;t=`) {
				t.Errorf("reply %d: remaining %q, RateLimit %q", i, h.Get("X-RateLimit-Remaining"), rl)
			}
			if h.Get("Content-Type") != "application/problem+json" {
				t.Errorf("reply %d: Content-Type %q", i, h.Get("Content-Type"))
			}
		default:
			t.Errorf("reply %d: status %d", i, r.status)
		}
	}
	if allowed != 100 || denied != 200 {
		t.Errorf("%d allowed, %d denied; want exactly 100 and 200", allowed, denied)
	}
	// The state is in Redis, with an expiry.
	keys, err := srv.Do("KEYS", "*")
	if err != nil || !strings.Contains(keys, "default|ip:127.0.0.1") {
		t.Errorf("keys in Redis: %q, %v", keys, err)
	}
	for _, k := range strings.Split(keys, "\n") {
		if ttl, err := srv.Do("PTTL", k); err != nil || ttl == "-1" || ttl == "-2" {
			t.Errorf("PTTL %s = %s, %v", k, ttl, err)
		}
	}
	// Every replica took part in admitting.
	for _, name := range []string{"0", "1", "2"} {
		if perReplica[name] == 0 {
			t.Errorf("replica %s admitted nothing: %v", name, perReplica)
		}
	}
}

// The failure ratewarden exists to fix: with an in-process store per
// replica, each replica enforces its own 100 per hour, and the client
// gets 3 × 100 = 300 requests through a limit of 100.
func TestEndToEndMemstorePerReplicaAdmitsThreeTimesTheLimit(t *testing.T) {
	var stores []ratewarden.Store
	for range 3 {
		st, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		stores = append(stores, st)
	}
	replies := runReplicas(t, stores)
	perReplica := map[string]int{}
	allowed := 0
	for _, r := range replies {
		if r.status == http.StatusOK {
			allowed++
			perReplica[r.replica]++
		}
	}
	if allowed != 300 {
		t.Errorf("%d of 300 allowed with per-replica memory; want all 300 (the limit is not shared)", allowed)
	}
	if fmt.Sprint(perReplica) != "map[0:100 1:100 2:100]" {
		t.Errorf("per replica %v, want 100 each", perReplica)
	}
}

// The same with six clients sending at once: still exactly 100, as each
// check is one atomic script run in Redis.
func TestEndToEndReplicasShareOneRedisConcurrently(t *testing.T) {
	srv := testredis.Start(t)
	stores := []ratewarden.Store{newRedisStore(t, srv.Addr), newRedisStore(t, srv.Addr), newRedisStore(t, srv.Addr)}
	replies := runReplicasConcurrently(t, stores, 6)
	counts := map[int]int{}
	for _, r := range replies {
		counts[r.status]++
	}
	if counts[http.StatusOK] != 100 || counts[http.StatusTooManyRequests] != 200 || len(counts) != 2 {
		t.Errorf("statuses %v, want exactly 100 × 200 and 200 × 429", counts)
	}
}

// A client that hangs up while Redis is asked gets nothing more: the
// handler does not run and no store failure is logged.
func TestCanceledRequestIsDropped(t *testing.T) {
	srv := testredis.Start(t)
	l, err := ratewarden.New(newRedisStore(t, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	log, logBuf := newLogger()
	next := new(ok)
	h := mustNew(t, l, httplimit.WithLimits(perHour), httplimit.WithLogger(log)).Handler(next)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	r.RemoteAddr = client
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if next.calls() != 0 || w.Body.Len() != 0 || logBuf.String() != "" {
		t.Errorf("canceled request: next called %d times, body %q, log %q", next.calls(), w.Body.String(), logBuf.String())
	}
	// A live request on the same middleware is decided by Redis as usual.
	if w := get(h, client, "/", nil); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "99" {
		t.Errorf("live request: %d %v", w.Code, w.Header())
	}
}
