package demo

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/memstore"
)

// Header names the demo uses between its client, proxy and replicas.
const (
	// clientHeader carries the client's API key: the key it is limited by.
	clientHeader = "X-Api-Key"
	// replicaHeader tells the client which replica answered (1-based).
	replicaHeader = "X-Demo-Replica"
)

// shutdownGrace bounds how long a server waits for requests in flight when
// the demo ends.
const shutdownGrace = 5 * time.Second

// replicaStore is the store one replica decides on, and how to release it.
type replicaStore struct {
	st    ratewarden.Store
	close func()
}

func closeStores(ss []replicaStore) {
	for _, s := range ss {
		if s.close != nil {
			s.close()
		}
	}
}

// localStores gives every replica its own in-memory store.
func localStores(n int) ([]replicaStore, error) {
	out := make([]replicaStore, 0, n)
	for range n {
		st, err := memstore.New()
		if err != nil {
			closeStores(out)
			return nil, err
		}
		out = append(out, replicaStore{st: st, close: func() { _ = st.Close() }})
	}
	return out, nil
}

// httpServer is one loopback HTTP server and its serving goroutine.
type httpServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

var discardLog = log.New(io.Discard, "", 0)

// listen starts serving h on a free loopback port and records the address.
func listen(h http.Handler, rep *Report) (*httpServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: listen: %w", err)
	}
	rep.Addrs = append(rep.Addrs, ln.Addr().String())
	s := &httpServer{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: discardLog},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln) // ends with ErrServerClosed on shutdown
	}()
	return s, nil
}

func (s *httpServer) addr() string { return s.ln.Addr().String() }

// shutdown lets requests in flight finish (up to shutdownGrace), then
// closes everything, and waits for the serving goroutine.
func (s *httpServer) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}

// cluster is the replicas behind the round-robin proxy.
type cluster struct {
	replicas []*httpServer
	proxy    *httpServer
	proxyTr  *http.Transport
}

// startCluster starts one replica per store and the proxy in front.
func startCluster(cfg *Config, stores []replicaStore, rep *Report) (*cluster, error) {
	c := &cluster{}
	targets := make([]*url.URL, 0, len(stores))
	for i, rs := range stores {
		lim, err := ratewarden.New(rs.st)
		if err != nil {
			c.close()
			return nil, err
		}
		mw, err := httplimit.New(lim,
			httplimit.WithLimits(cfg.Limit),
			httplimit.WithKey(httplimit.Header(clientHeader)),
			httplimit.WithFailClosed(true), // a store error is an error here, not a free pass
			httplimit.WithLogger(slog.New(slog.DiscardHandler)),
		)
		if err != nil {
			c.close()
			return nil, err
		}
		id := strconv.Itoa(i + 1)
		api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "hello from replica "+id+"\n")
		}))
		s, err := listen(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(replicaHeader, id)
			api.ServeHTTP(w, r)
		}), rep)
		if err != nil {
			c.close()
			return nil, err
		}
		c.replicas = append(c.replicas, s)
		targets = append(targets, &url.URL{Scheme: "http", Host: s.addr()})
	}
	c.proxyTr = &http.Transport{
		MaxIdleConnsPerHost: cfg.Concurrency,
		IdleConnTimeout:     30 * time.Second,
	}
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			n := next.Add(1) - 1
			pr.SetURL(targets[n%uint64(len(targets))])
			pr.SetXForwarded()
		},
		Transport: c.proxyTr,
		ErrorLog:  discardLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p, err := listen(rp, rep)
	if err != nil {
		c.close()
		return nil, err
	}
	c.proxy = p
	return c, nil
}

func (c *cluster) url() string { return "http://" + c.proxy.addr() + "/hello" }

// close stops the proxy, then the replicas, and drops idle connections.
func (c *cluster) close() {
	if c.proxy != nil {
		c.proxy.shutdown()
	}
	if c.proxyTr != nil {
		c.proxyTr.CloseIdleConnections()
	}
	for _, r := range c.replicas {
		r.shutdown()
	}
}

// runOnce starts a cluster on stores (and releases both afterwards), sends
// the client's traffic through it and counts the answers.
func runOnce(ctx context.Context, cfg *Config, rep *Report, name, label string, stores []replicaStore, clientKey string) (RunResult, error) {
	defer closeStores(stores)
	res := RunResult{Name: name, Label: label, Replicas: make([]ReplicaCount, cfg.Replicas)}
	c, err := startCluster(cfg, stores, rep)
	if err != nil {
		return res, err
	}
	defer c.close()

	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, IdleConnTimeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	var pb *progressBar
	if cfg.Progress != nil {
		pb = startProgress(cfg.Progress, name, cfg.Requests)
	}
	var (
		mu      sync.Mutex
		next    atomic.Int64
		wg      sync.WaitGroup
		lastErr error
	)
	res.Cumulative = make([]int, 0, cfg.Requests)
	res.Start = time.Now()
	target := c.url()
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Requests) || ctx.Err() != nil {
					return
				}
				status, replica, err := send(ctx, client, target, clientKey)
				if err != nil && ctx.Err() != nil {
					return // cancelled: this request does not count
				}
				mu.Lock()
				switch {
				case err != nil:
					res.Errors++
					lastErr = err
				case status == http.StatusOK:
					res.Admitted++
				case status == http.StatusTooManyRequests:
					res.Rejected++
				default:
					res.Errors++
					lastErr = fmt.Errorf("answer %d %s", status, http.StatusText(status))
				}
				if err == nil && replica >= 1 && replica <= len(res.Replicas) {
					switch status {
					case http.StatusOK:
						res.Replicas[replica-1].Admitted++
					case http.StatusTooManyRequests:
						res.Replicas[replica-1].Rejected++
					}
				}
				res.Cumulative = append(res.Cumulative, res.Admitted)
				done := len(res.Cumulative)
				if pb != nil {
					pb.set(done, res.Admitted)
				}
				mu.Unlock()
				if cfg.afterRequest != nil {
					cfg.afterRequest(name, done)
				}
			}
		})
	}
	wg.Wait()
	res.Duration = time.Since(res.Start)
	if pb != nil {
		pb.stop()
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("demo: %s run stopped: %w", name, err)
	}
	res.Expected = expected(cfg, name)
	res.Note = note(cfg.Limit, res.Start, res.Duration)
	if res.Errors > 0 {
		return res, fmt.Errorf("demo: %s run: %d of %d requests failed (last: %v)", name, res.Errors, cfg.Requests, lastErr)
	}
	return res, nil
}

// send makes one request and reports the status and the replica that
// answered (0 when none said).
func send(ctx context.Context, client *http.Client, target, clientKey string) (int, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set(clientHeader, clientKey)
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		return 0, 0, err
	}
	replica, _ := strconv.Atoi(resp.Header.Get(replicaHeader))
	return resp.StatusCode, replica, nil
}

// expected is what a correct limiter admits in a run of kind name, when the
// whole run fits in one period: the round-robin proxy hands replica i
// every Replicas-th request, and a local limiter admits up to the capacity
// of what it receives.
func expected(cfg *Config, name string) int {
	capacity := int(min(cfg.Limit.Capacity(), int64(MaxRequests)))
	if name != RunLocal {
		return min(capacity, cfg.Requests)
	}
	total := 0
	for i := range cfg.Replicas {
		share := (cfg.Requests - i + cfg.Replicas - 1) / cfg.Replicas
		total += min(share, capacity)
	}
	return total
}

// note says why a run's count may legitimately differ from Expected.
func note(l ratewarden.Limit, start time.Time, d time.Duration) string {
	end := start.Add(d)
	p := l.Period.Milliseconds()
	crossed := start.UnixMilli()/p != end.UnixMilli()/p
	switch l.Algorithm {
	case ratewarden.FixedWindow:
		if crossed {
			return fmt.Sprintf("the run crossed a %v window boundary: each fixed window admits the limit again", l.Period)
		}
	case ratewarden.SlidingWindow:
		if crossed {
			return "the run crossed a window boundary: sliding_window weighs the previous window, an approximation"
		}
	case ratewarden.TokenBucket:
		if every := l.Period / time.Duration(l.Rate); d >= every {
			return fmt.Sprintf("a token_bucket refills one token every %v; the run lasted %v", every, d.Round(time.Millisecond))
		}
	}
	if d >= l.Period {
		return fmt.Sprintf("the run lasted %v, longer than the %v period: later requests fall in a new window", d.Round(time.Millisecond), l.Period)
	}
	return ""
}
