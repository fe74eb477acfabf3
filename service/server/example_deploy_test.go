package server_test

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/internal/tlsfiles"
	"github.com/ratewarden/ratewarden/service/server"
)

// ExampleServer_SetConfig puts a configuration from elsewhere (an xDS
// update, say) in force, with its version.
func ExampleServer_SetConfig() {
	b, err := backend.NewMemory(server.DefaultMaxKeyBytes)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	first, _ := config.Parse("native.yaml", []byte("policies: {api: 10/1s}\n"))
	s, err := server.New(b, server.WithConfig(first), server.WithNearLimitRatio(0.9),
		server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	src, v := s.ConfigVersion()
	fmt.Printf("%s %q\n", src, v)
	next, _ := config.Parse("xds", []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"))
	if err := s.SetConfig(next, "xds", "v2"); err != nil {
		fmt.Println(err)
		return
	}
	src, v = s.ConfigVersion()
	fmt.Printf("%s %q\n", src, v)
	fmt.Println(len(s.Config().Domains))
	// Output:
	// static ""
	// xds "v2"
	// 1
}

// ExampleWithTLS: the files must load when the server is made;
// afterwards a rotation on disk is served without a restart.
func ExampleWithTLS() {
	b, err := backend.NewMemory(server.DefaultMaxKeyBytes)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	cfg, _ := config.Parse("native.yaml", []byte("policies: {api: 10/1s}\n"))
	_, err = server.New(b, server.WithConfig(cfg), server.WithTLS(tlsfiles.Server{CertFile: "server.pem"}, server.TLSGRPC),
		server.WithLogger(slog.New(slog.DiscardHandler)))
	fmt.Println(errors.Is(err, ratewarden.ErrInvalidConfig))
	fmt.Println(err)
	// Output:
	// true
	// server: WithTLS: tlsfiles: a certificate and a key file are both needed: invalid config
}
