package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
)

// ExampleWithInlineLimits turns inline limits on, within maxima, caps keys
// at 64 bytes and moves /metrics to an admin address.
func ExampleWithInlineLimits() {
	b, err := backend.NewMemory(server.DefaultMaxKeyBytes)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	cfg, err := config.Parse("example.yaml", []byte("policies: {api: 100/1m}\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := server.New(b, server.WithConfig(cfg), server.WithLogger(slog.New(slog.DiscardHandler)),
		server.WithInlineLimits(config.InlineLimits{Enabled: true, MaxPeriod: time.Hour, MaxSlidingLog: 100}),
		server.WithMaxKeyBytes(64),
		server.WithAdminAddr("127.0.0.1:0"))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	defer http.DefaultClient.CloseIdleConnections()
	for _, body := range []string{
		`{"key":"k","limit":"10/1m"}`,
		`{"key":"k","limit":"1000/1m sliding_log"}`,
		`{"key":"k","limit":"10/1d"}`,
	} {
		resp, err := http.Post("http://"+s.HTTPAddr()+"/v1/check", "application/json", bytes.NewBufferString(body))
		if err != nil {
			fmt.Println(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, body)
	}
	resp, err := http.Get("http://" + s.AdminAddr() + "/readyz")
	if err != nil {
		fmt.Println(err)
		return
	}
	ready, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("admin /readyz: %s", ready)
	// Output:
	// 200 {"key":"k","limit":"10/1m"}
	// 400 {"key":"k","limit":"1000/1m sliding_log"}
	// 400 {"key":"k","limit":"10/1d"}
	// admin /readyz: ready
}
