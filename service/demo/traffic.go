package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/service/demo/fleet"
)

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
			return nil, fmt.Errorf("demo: %w", err)
		}
		out = append(out, replicaStore{st: st, close: func() { _ = st.Close() }})
	}
	return out, nil
}

// runOnce starts a fleet on stores (and releases both afterwards), sends
// the client's traffic through it and counts the answers.
func runOnce(ctx context.Context, cfg *Config, rep *Report, name, label string, stores []replicaStore, clientKey string) (RunResult, error) {
	defer closeStores(stores)
	res := RunResult{Name: name, Label: label, Replicas: make([]ReplicaCount, cfg.Replicas)}
	sts := make([]ratewarden.Store, len(stores))
	for i, s := range stores {
		sts[i] = s.st
	}
	f, err := fleet.Start(cfg.Limit, sts, fleet.WithIdleConns(cfg.Concurrency))
	if err != nil {
		return res, fmt.Errorf("demo: %w", err)
	}
	rep.Addrs = append(rep.Addrs, f.Addrs()...)
	defer f.Close()

	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, IdleConnTimeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	t := &tally{res: &res}
	if cfg.Progress != nil {
		t.pb = startProgress(cfg.Progress, name, cfg.Requests)
	}
	res.Cumulative = make([]int, 0, cfg.Requests)
	res.Start = time.Now()
	send(ctx, cfg, &http.Client{Transport: tr, Timeout: 30 * time.Second}, f.URL(), clientKey, t)
	res.Duration = time.Since(res.Start)
	if t.pb != nil {
		t.pb.stop()
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("demo: %s run stopped: %w", name, err)
	}
	res.Expected = expected(cfg, name)
	res.Note = note(cfg.Limit, res.Start, res.Duration)
	if res.Errors > 0 {
		return res, fmt.Errorf("demo: %s run: %d of %d requests failed (last: %v)", name, res.Errors, cfg.Requests, t.lastErr)
	}
	return res, nil
}

// send sends cfg.Requests requests to target, cfg.Concurrency at a time,
// and counts each answer in t. It stops early when ctx is done.
func send(ctx context.Context, cfg *Config, client *http.Client, target, clientKey string, t *tally) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Requests) || ctx.Err() != nil {
					return
				}
				status, replica, err := get(ctx, client, target, clientKey)
				if err != nil && ctx.Err() != nil {
					return // cancelled: this request does not count
				}
				done := t.add(status, replica, err)
				if cfg.afterRequest != nil {
					cfg.afterRequest(t.res.Name, done)
				}
			}
		})
	}
	wg.Wait()
}

// tally counts the answers of one run as they arrive.
type tally struct {
	mu      sync.Mutex
	res     *RunResult
	lastErr error
	pb      *progressBar
}

// add counts one answer and returns how many have come.
func (t *tally) add(status, replica int, err error) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.res
	switch {
	case err != nil:
		r.Errors++
		t.lastErr = err
	case status == http.StatusOK:
		r.Admitted++
	case status == http.StatusTooManyRequests:
		r.Rejected++
	default:
		r.Errors++
		t.lastErr = fmt.Errorf("answer %d %s", status, http.StatusText(status))
	}
	if err == nil && replica >= 1 && replica <= len(r.Replicas) {
		switch status {
		case http.StatusOK:
			r.Replicas[replica-1].Admitted++
		case http.StatusTooManyRequests:
			r.Replicas[replica-1].Rejected++
		}
	}
	r.Cumulative = append(r.Cumulative, r.Admitted)
	if t.pb != nil {
		t.pb.set(len(r.Cumulative), r.Admitted)
	}
	return len(r.Cumulative)
}

// get makes one request and reports the status and the replica that
// answered (0 when none said).
func get(ctx context.Context, client *http.Client, target, clientKey string) (int, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set(fleet.ClientHeader, clientKey)
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		return 0, 0, err
	}
	replica, _ := strconv.Atoi(resp.Header.Get(fleet.ReplicaHeader))
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
