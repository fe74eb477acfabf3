package apistore_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/demo/apistore"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
)

func ExampleNew() {
	b, err := backend.NewMemory(server.DefaultMaxKeyBytes)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	conf, err := config.Parse("example.yaml", []byte("policies: {unused: 1/1s}\ninline_limits: {enabled: true}\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := server.New(b, server.WithConfig(conf), server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := srv.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()

	st := apistore.New("http://" + srv.HTTPAddr())
	defer st.Close()
	lim, err := ratewarden.New(st)
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		r, err := lim.Allow(context.Background(), "user:1", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Hour})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(r.Allowed, r.Remaining)
	}
	// Output:
	// true 0
	// false 0
}
