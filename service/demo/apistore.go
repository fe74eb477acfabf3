package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/server"
)

// apiStore is a ratewarden.Store that asks a ratewarden server over its
// HTTP API: POST /v1/check (or /v1/peek) with the key, the limit in its
// String form and the cost. The server decides atomically on its own
// store, so replicas sharing one server share the limit.
//
// The API checks one limit per call, so apiStore refuses multi-limit
// requests rather than split them into calls that would not be atomic.
type apiStore struct {
	base   string
	tr     *http.Transport
	client *http.Client
}

func newAPIStore(base string) *apiStore {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &apiStore{base: base, tr: tr, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

func (s *apiStore) close() { s.tr.CloseIdleConnections() }

// Check implements ratewarden.Store.
func (s *apiStore) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if len(req.Limits) != 1 {
		return fmt.Errorf("demo: ratewarden API: %w: the HTTP API checks one limit per call, got %d", ratewarden.ErrInvalidLimit, len(req.Limits))
	}
	l := req.Limits[0]
	path := "/v1/check"
	if req.Peek {
		path = "/v1/peek"
	}
	cost := req.Cost
	var d server.Decision
	if err := s.post(ctx, path, server.CheckRequest{Key: req.Key, Limit: l.String(), Cost: &cost}, &d); err != nil {
		return err
	}
	res[0] = ratewarden.Result{
		Allowed:    d.Allowed,
		Limit:      l,
		Remaining:  d.Remaining,
		RetryAfter: time.Duration(d.RetryAfterMS) * time.Millisecond,
		ResetAfter: time.Duration(d.ResetAfterMS) * time.Millisecond,
		Source:     parseSource(d.Source),
	}
	return nil
}

// Reset implements ratewarden.Store.
func (s *apiStore) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	for _, l := range limits {
		if err := s.post(ctx, "/v1/reset", server.ResetRequest{Key: key, Limit: l.String()}, nil); err != nil {
			return err
		}
	}
	return nil
}

func (s *apiStore) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("demo: ratewarden API: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("demo: ratewarden API: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("demo: ratewarden API %s: %w: %w", path, ratewarden.ErrStoreUnavailable, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("demo: ratewarden API %s: %w: %w", path, ratewarden.ErrStoreUnavailable, err)
	}
	switch {
	case resp.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("demo: ratewarden API %s: %w: %s", path, ratewarden.ErrInvalidLimit, bytes.TrimSpace(b))
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("demo: ratewarden API %s: %w: %w %s: %s", path, ratewarden.ErrStoreUnavailable, errNotOK, resp.Status, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("demo: ratewarden API %s: %w: decoding the answer: %w", path, ratewarden.ErrStoreUnavailable, err)
	}
	return nil
}

func parseSource(s string) ratewarden.Source {
	for src := ratewarden.SourceStore; src <= ratewarden.SourceLocalFallback; src++ {
		if src.String() == s {
			return src
		}
	}
	return ratewarden.SourceStore
}
