package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/memstore"
)

// TestClientCannotEscapeItsLimit: a client sending a different made-up
// X-API-Key with each request is still limited by its IP address.
func TestClientCannotEscapeItsLimit(t *testing.T) {
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lim, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	limit := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 2, Period: time.Hour}
	h, err := handler(slog.New(slog.DiscardHandler), lim, []ratewarden.Limit{limit}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	get := func(remote, apiKey string) int {
		req := httptest.NewRequest(http.MethodGet, "/hello", nil)
		req.RemoteAddr = remote
		if apiKey != "" {
			req.Header.Set("X-API-Key", apiKey)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	// A token bucket of 2 that refills one token per 30 minutes: no
	// window to straddle.
	codes := []int{get("192.0.2.1:1000", "a"), get("192.0.2.1:1001", "b"), get("192.0.2.1:1002", "c")}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != http.StatusTooManyRequests {
		t.Fatalf("3 requests from one IP with 3 API keys: %v, want [200 200 429]", codes)
	}
	if c := get("192.0.2.2:1000", ""); c != 200 {
		t.Errorf("another IP: %d, want 200", c)
	}
}

// TestRedisStore: given -redis, the server decides on the Redis stack; a
// client over its limit is then answered by its deny cache.
func TestRedisStore(t *testing.T) {
	srv := testredis.Start(t)
	// A deadline no busy machine misses: the answers are then Redis' and
	// the deny cache's, never the failure policy's.
	st, closeStore, err := openStore(slog.New(slog.DiscardHandler), srv.Addr, 2, fallback.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	lim, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	limit := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Hour}
	var sources []ratewarden.Source
	for range 3 {
		r, err := lim.Allow(t.Context(), "192.0.2.1", limit)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, r.Source)
	}
	if sources[0] != ratewarden.SourceStore || sources[1] != ratewarden.SourceStore || sources[2] != ratewarden.SourceCache {
		t.Errorf("sources %v, want [store store cache]", sources)
	}
}
