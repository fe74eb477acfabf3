// Package apistore is a ratewarden.Store that asks a ratewarden server
// over its HTTP API: POST /v1/check (or /v1/peek, /v1/reset) with the key,
// the limit in its String form and the cost. The server decides atomically
// on its own store, so replicas sharing one server share the limit. The
// demo's replicas use it when there is no Redis.
//
// The API checks one limit per call, so a Store refuses multi-limit
// requests rather than split them into calls that would not be atomic.
package apistore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/demo/checkonly"
	"github.com/ratewarden/ratewarden/service/server/api"
)

// Store is a client of one ratewarden server's HTTP API. It only checks
// and resets.
type Store struct {
	checkonly.Rest
	base   string
	tr     *http.Transport
	client *http.Client
}

// New returns a Store calling the server at base ("http://127.0.0.1:8080"),
// each call bounded by 10 s besides its context.
func New(base string) *Store {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &Store{base: base, tr: tr, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// Close drops the idle connections.
func (s *Store) Close() { s.tr.CloseIdleConnections() }

// Check implements ratewarden.Store.
func (s *Store) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if len(req.Limits) != 1 {
		return fmt.Errorf("apistore: the HTTP API checks one limit per call, got %d: %w", len(req.Limits), ratewarden.ErrInvalidLimit)
	}
	l := req.Limits[0]
	path := "/v1/check"
	if req.Peek {
		path = "/v1/peek"
	}
	cost := req.Cost
	var d api.Decision
	if err := s.post(ctx, path, api.CheckRequest{Key: req.Key, Limit: l.String(), Cost: &cost}, &d); err != nil {
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
func (s *Store) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	for _, l := range limits {
		if err := s.post(ctx, "/v1/reset", api.ResetRequest{Key: key, Limit: l.String()}, nil); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("apistore: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("apistore: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("apistore: %s: %w: %w", path, err, ratewarden.ErrStoreUnavailable)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("apistore: %s: %w: %w", path, err, ratewarden.ErrStoreUnavailable)
	}
	switch {
	case resp.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("apistore: %s: %s: %w", path, bytes.TrimSpace(b), ratewarden.ErrInvalidLimit)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("apistore: %s: answered %s: %s: %w", path, resp.Status, bytes.TrimSpace(b), ratewarden.ErrStoreUnavailable)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("apistore: %s: decoding the answer: %w: %w", path, err, ratewarden.ErrStoreUnavailable)
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
