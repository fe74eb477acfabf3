package server_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server"
)

func TestHotReloadKeepsOldConfigWhenBroken(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "policies.yaml")
	writeFile(t, f, "policies:\n  api: 1/1h fixed_window\n")
	s := start(t, memBackend(t), server.WithConfigPaths(dir), server.WithReloadInterval(20*time.Millisecond))
	rate := func() int64 { return s.Config().Policies["api"].Limit.Rate }
	if rate() != 1 {
		t.Fatalf("rate %d", rate())
	}

	// A valid edit is picked up by polling.
	writeFile(t, f, "policies:\n  api: 2/1h fixed_window\n  new: 5/1m\n")
	eventually(t, waitCap, "reload to rate 2", func() bool { return rate() == 2 })
	if r := post(t, s, "/v1/check", `{"key":"k","policy":"new"}`); r.body["allowed"] != true {
		t.Fatalf("new policy: %s", r.raw)
	}

	// A broken edit is reported and the old config stays in force.
	before := metric(t, s, "ratewarden_config_reloads_total", `result="failure"`)
	writeFile(t, f, "policies:\n  api: 3/1h fixed_window\n  new: {rate: -1}\n")
	eventually(t, waitCap, "a failed reload", func() bool {
		return metric(t, s, "ratewarden_config_reloads_total", `result="failure"`) > before
	})
	if rate() != 2 {
		t.Fatalf("broken config replaced the running one: rate %d", rate())
	}
	if got := metric(t, s, "ratewarden_config_last_reload_successful"); got != 0 {
		t.Errorf("last_reload_successful = %v after a failure", got)
	}
	if r := post(t, s, "/v1/check", `{"key":"k2","policy":"new"}`); r.body["allowed"] != true {
		t.Fatalf("old config no longer serves: %s", r.raw)
	}
	// An explicit Reload (what SIGHUP does) reports the problems with file:line.
	err := s.Reload()
	if !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Fatalf("Reload = %v", err)
	}
	if ps := config.Problems(err); len(ps) != 1 || ps[0].File != f || ps[0].Line != 3 {
		t.Errorf("problems %v", ps)
	}

	// Fixing the file recovers.
	writeFile(t, f, "policies:\n  api: 4/1h fixed_window\n")
	eventually(t, waitCap, "reload to rate 4", func() bool { return rate() == 4 })
	if got := metric(t, s, "ratewarden_config_last_reload_successful"); got != 1 {
		t.Errorf("last_reload_successful = %v after recovery", got)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := server.New(memBackend(t), server.WithConfigPaths(filepath.Join("..", "config", "testdata", "invalid", "bad_unit.yaml")))
	if !errors.Is(err, ratewarden.ErrInvalidConfig) || len(config.Problems(err)) != 1 {
		t.Fatalf("New = %v", err)
	}
	if _, err := server.New(memBackend(t)); !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Fatalf("New without config = %v", err)
	}
}

// TestReloadRefusesEmptyConfig: truncating the watched file (what `cat > f`
// or a non-atomic save does first) must not install an empty
// configuration, which would lift every limit (a block list too): the old
// one stays in force and the failure is counted.
func TestReloadRefusesEmptyConfig(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "config.yaml")
	writeFile(t, f, "policies:\n  api: 1/1h fixed_window\n---\ndomain: edge\ndescriptors:\n  - key: path\n    value: /admin\n    rate_limit: {unit: second, requests_per_unit: 0}\n")
	s := start(t, memBackend(t), server.WithConfigPaths(dir), server.WithReloadInterval(20*time.Millisecond))
	c := rlsClient(t, s)
	wantCodes(t, "blocked before", shouldRL(t, c, "edge", 1, desc("path", "/admin")), over, over)

	before := metric(t, s, "ratewarden_config_reloads_total", `result="failure"`)
	writeFile(t, f, "")
	eventually(t, waitCap, "a failed reload", func() bool {
		return metric(t, s, "ratewarden_config_reloads_total", `result="failure"`) > before
	})
	if got := metric(t, s, "ratewarden_config_last_reload_successful"); got != 0 {
		t.Errorf("last_reload_successful = %v after an empty config", got)
	}
	if cfg := s.Config(); len(cfg.Policies) != 1 || len(cfg.Domains) != 1 {
		t.Fatalf("empty config installed: %d policies, %d domains", len(cfg.Policies), len(cfg.Domains))
	}
	wantCodes(t, "still blocked", shouldRL(t, c, "edge", 1, desc("path", "/admin")), over, over)
	if err := s.Reload(); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "no policies or domains") {
		t.Errorf("Reload = %v", err)
	}
}

// TestNewRefusesEmptyConfigDir: starting on a directory with no config in
// it fails with a clear error.
func TestNewRefusesEmptyConfigDir(t *testing.T) {
	dir := t.TempDir()
	_, err := server.New(memBackend(t), server.WithConfigPaths(dir))
	if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), dir+": no policies or domains") {
		t.Fatalf("New = %v", err)
	}
}
