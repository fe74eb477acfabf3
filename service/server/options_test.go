package server_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/internal/tlsfiles"
	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/server/rls"
)

// TestNewNamesTheOptionAtFault: New refuses an option it cannot use, a
// nil one included, with an invalid-config error naming it.
func TestNewNamesTheOptionAtFault(t *testing.T) {
	cfg := server.WithConfig(parseConfig(t, "policies: {api: 10/1s}\n"))
	for _, tc := range []struct {
		opt  server.Option
		want string
	}{
		{nil, "server: option 1 is nil"},
		{server.WithConfig(nil), "WithConfig: config must not be nil"},
		{server.WithLogger(nil), "WithLogger: logger must not be nil"},
		{server.WithMaxKeyBytes(0), "WithMaxKeyBytes: max key bytes must be > 0, got 0"},
		{server.WithNearLimitRatio(1.5), "WithNearLimitRatio: want a ratio above 0, at most 1, got 1.5"},
		{server.WithEnvoyCompat(rls.EnvoyCompat{Headers: 9}), "WithEnvoyCompat: unknown Headers 9"},
		{server.WithDefaultFailure(0), "WithDefaultFailure:"},
		{server.WithReservationSecrets([]byte("short")), "WithReservationSecrets: secret 0 is 5 bytes, want at least 16"},
		{server.WithTLS(tlsfiles.Server{CertFile: "c.pem", KeyFile: "k.pem"}, 0), "WithTLS: give files and servers"},
		{server.WithTLS(tlsfiles.Server{}, server.TLSGRPC), "WithTLS: give files and servers"},
		{server.WithTLS(tlsfiles.Server{CertFile: "c.pem"}, server.TLSHTTP), "WithTLS: tlsfiles: a certificate and a key file are both needed"},
	} {
		s, err := server.New(memBackend(t), cfg, tc.opt)
		if s != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with a bad option: %v, %v; want an invalid-config error saying %q", s, err, tc.want)
		}
	}
}
