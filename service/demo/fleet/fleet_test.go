package fleet

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/service/demo/checkonly"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// keyStore records the keys it was asked about and admits everything.
type keyStore struct {
	checkonly.Rest
	mu   sync.Mutex
	keys []string
}

func (s *keyStore) Check(_ context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	s.mu.Lock()
	s.keys = append(s.keys, req.Key)
	s.mu.Unlock()
	for i, l := range req.Limits {
		res[i] = ratewarden.Result{Allowed: true, Limit: l, Remaining: l.Capacity()}
	}
	return nil
}

func (s *keyStore) Reset(context.Context, string, ...ratewarden.Limit) error { return nil }

func get(t *testing.T, c *http.Client, url, apiKey string) (int, int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(ClientHeader, apiKey)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	replica, _ := strconv.Atoi(resp.Header.Get(ReplicaHeader))
	return resp.StatusCode, replica
}

// TestRoundRobinAndLocalLimits: the proxy hands the replicas requests in
// turn, each replica limits on its own store, and a store sees the key
// LimiterKey names.
func TestRoundRobinAndLocalLimits(t *testing.T) {
	limit := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 2, Period: time.Hour}
	var stores []ratewarden.Store
	for range 2 {
		st, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		stores = append(stores, st)
	}
	rec := &keyStore{}
	stores = append(stores, rec)
	f, err := Start(limit, stores, WithIdleConns(2))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	admitted := map[int]int{}
	for i := range 12 {
		status, replica := get(t, c, f.URL(), "client-1")
		if replica != i%3+1 {
			t.Errorf("request %d answered by replica %d, want %d", i, replica, i%3+1)
		}
		if status == http.StatusOK {
			admitted[replica]++
		} else if status != http.StatusTooManyRequests {
			t.Errorf("request %d: status %d", i, status)
		}
	}
	if admitted[1] != 2 || admitted[2] != 2 || admitted[3] != 4 {
		t.Errorf("admitted per replica %v, want 2 and 2 (limited locally) and 4 (admits all)", admitted)
	}
	want, err := LimiterKey("client-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.keys) == 0 || rec.keys[0] != want {
		t.Errorf("store saw keys %q, LimiterKey says %q", rec.keys, want)
	}
	addrs := f.Addrs()
	tr.CloseIdleConnections()
	f.Close()
	if len(addrs) != 4 {
		t.Errorf("addresses %v, want 3 replicas and the proxy", addrs)
	}
	for _, a := range addrs {
		if conn, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after Close", a)
		}
	}
}

func TestStartValidates(t *testing.T) {
	l := ratewarden.PerMinute(1)
	if _, err := Start(l, nil); !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Errorf("no stores: %v", err)
	}
	if _, err := Start(l, []ratewarden.Store{&keyStore{}}, WithIdleConns(0)); !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Errorf("zero idle connections: %v", err)
	}
	if _, err := Start(l, []ratewarden.Store{&keyStore{}}, nil); !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Errorf("nil option: %v", err)
	}
}
