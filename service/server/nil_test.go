package server_test

import (
	"errors"
	"testing"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/server/decide"
)

// TestNewRefusesNilBackend: a nil Backend, or a nil *backend.Memory or
// *backend.Redis inside one, is ErrInvalidConfig at New, not a panic later.
func TestNewRefusesNilBackend(t *testing.T) {
	var mem *backend.Memory
	var red *backend.Redis
	for name, be := range map[string]decide.Backend{"nil": nil, "nil *backend.Memory": mem, "nil *backend.Redis": red} {
		s, err := server.New(be)
		if !errors.Is(err, ratewarden.ErrInvalidConfig) || s != nil {
			t.Errorf("server.New(%s) = %v, %v; want nil, ErrInvalidConfig", name, s, err)
		}
	}
}
