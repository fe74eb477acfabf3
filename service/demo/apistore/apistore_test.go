package apistore

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
)

// TestAPIStore checks the store the replicas use to share a limit through
// a real ratewarden server: it admits the limit then denies, peeks without
// consuming, resets, refuses what the API cannot do atomically, and turns
// a server that is gone into ErrStoreUnavailable.
func TestAPIStore(t *testing.T) {
	defer goleak.VerifyNone(t)
	b, err := backend.NewMemory(server.DefaultMaxKeyBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conf, err := config.Parse("t.yaml", []byte("policies: {unused: 1/1s}\ninline_limits: {enabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(b, server.WithConfig(conf), server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	st := New("http://" + srv.HTTPAddr())
	defer st.Close()
	lim, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 3, Period: time.Hour}
	for i := range 3 {
		r, err := lim.Allow(ctx, "k", l)
		if err != nil || !r.Allowed || r.Remaining != int64(2-i) || r.Limit != l || r.Source != ratewarden.SourceStore {
			t.Fatalf("allow %d: %+v %v", i, r, err)
		}
	}
	r, err := lim.Peek(ctx, "k", l)
	if err != nil || r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("peek at the limit: %+v %v", r, err)
	}
	r, err = lim.Allow(ctx, "k", l)
	if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > 20*time.Minute {
		t.Fatalf("over the limit: %+v %v", r, err)
	}
	if err := lim.Reset(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.Peek(ctx, "k", l); err != nil || !r.Allowed || r.Remaining != 3 {
		t.Fatalf("peek after reset: %+v %v", r, err)
	}
	if r, err := lim.Allow(ctx, "other", l); err != nil || !r.Allowed || r.Remaining != 2 {
		t.Fatalf("another key: %+v %v", r, err)
	}
	_, err = lim.AllowAll(ctx, "k", 1, l, ratewarden.PerSecond(1))
	if !errors.Is(err, ratewarden.ErrInvalidLimit) {
		t.Errorf("two limits: %v, want ErrInvalidLimit", err)
	}

	sctx, cancel := context.WithTimeout(ctx, time.Minute) // a cap for a busy machine
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := lim.Allow(ctx, "k", l); !errors.Is(err, ratewarden.ErrStoreUnavailable) {
		t.Errorf("server gone: %v, want ErrStoreUnavailable", err)
	}
}
