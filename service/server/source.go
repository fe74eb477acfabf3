package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	svcconfig "github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server/decide"
)

// snapshot is a loaded config with what the server derives from it.
type snapshot struct {
	cfg      *svcconfig.Config
	failures []fallback.Policy // every failure policy in use
	loaded   time.Time
	source   string // file, static or xds
	version  string // the xDS version, or the files' fingerprint
}

// Config returns the configuration in force.
func (s *Server) Config() *svcconfig.Config { return s.snap.Load().cfg }

func (s *Server) setConfig(cfg *svcconfig.Config, source, version string) {
	sn := &snapshot{cfg: cfg, loaded: time.Now(), source: source, version: version}
	add := func(fp fallback.Policy) {
		if !slices.Contains(sn.failures, fp) {
			sn.failures = append(sn.failures, fp)
		}
	}
	for _, p := range cfg.Policies {
		add(decide.Failure(cfg, s.defaultFailure, p.Failure))
	}
	for _, d := range cfg.Domains {
		var walk func([]*svcconfig.Descriptor)
		walk = func(ds []*svcconfig.Descriptor) {
			for _, n := range ds {
				if n.RateLimit != nil && n.RateLimit.Counted() {
					add(decide.Failure(cfg, s.defaultFailure, n.RateLimit.Failure, d.Failure))
				}
				walk(n.Descriptors)
			}
		}
		walk(d.Descriptors)
	}
	// By name, as /readyz and Ready's error list them.
	slices.SortFunc(sn.failures, func(a, b fallback.Policy) int { return strings.Compare(a.String(), b.String()) })
	s.api.SetConfig(cfg)
	s.rls.SetConfig(cfg)
	s.snap.Store(sn)
	s.m.SetVersion(source, version)
}

// loaded is the fingerprint of the config files in force.
func (s *Server) loaded() string {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	return s.fingerprint
}

// Reload loads the config paths again. When they are invalid it logs every
// problem, counts a failed reload and keeps the configuration in force.
func (s *Server) Reload() error {
	if s.paths == nil {
		return fmt.Errorf("server: no config paths to reload: %w", ratewarden.ErrInvalidConfig)
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if fp, err := svcconfig.Fingerprint(s.paths...); err == nil {
		s.fingerprint = fp
	}
	cfg, err := svcconfig.Loader{MergeDomains: s.envoy.MergeDomains}.Load(s.paths...)
	first := s.snap.Load() == nil
	if err != nil {
		s.m.Reloads.WithLabelValues("failure").Inc()
		s.m.ConfigOK.Set(0)
		if !first {
			s.log.Error("config reload failed; keeping the configuration in force", "paths", s.paths, "err", err)
		}
		return err
	}
	s.setConfig(cfg, "file", shortVersion(s.fingerprint))
	s.m.Reloads.WithLabelValues("success").Inc()
	s.m.ConfigOK.Set(1)
	for _, w := range cfg.Warnings {
		s.log.Warn("config: ignored", "where", w.String())
	}
	s.log.Info("config loaded", "files", cfg.Files, "policies", len(cfg.Policies), "domains", len(cfg.Domains), "reload", !first)
	return nil
}

// SetConfig puts cfg in force at once, for a configuration that comes from
// elsewhere than files (an xDS management server, say): requests already
// deciding finish on the configuration they started with, the next ones
// use cfg. source names where it came from (such as "xds") and version
// its version; both show in ratewarden_config_info and the config dump
// (/rlconfig). It counts a successful reload. It refuses (and changes
// nothing) a nil cfg and a server that loads files (WithConfigPaths),
// whose files would overwrite cfg at the next reload.
func (s *Server) SetConfig(cfg *svcconfig.Config, source, version string) error {
	switch {
	case cfg == nil:
		return fmt.Errorf("server: SetConfig: config must not be nil: %w", ratewarden.ErrInvalidConfig)
	case s.paths != nil:
		return fmt.Errorf("server: SetConfig: the server loads its config from files (WithConfigPaths): %w", ratewarden.ErrInvalidConfig)
	case source == "":
		return fmt.Errorf("server: SetConfig: source must not be empty: %w", ratewarden.ErrInvalidConfig)
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.setConfig(cfg, source, version)
	s.m.Reloads.WithLabelValues("success").Inc()
	s.m.ConfigOK.Set(1)
	for _, w := range cfg.Warnings {
		s.log.Warn("config: ignored", "where", w.String())
	}
	s.log.Info("config in force", "source", source, "version", version, "policies", len(cfg.Policies), "domains", len(cfg.Domains))
	return nil
}

// ConfigVersion returns the source and version of the configuration in
// force: "file" and a hash of the files' names and contents, "static"
// (WithConfig) and "", or what SetConfig was given.
func (s *Server) ConfigVersion() (source, version string) {
	sn := s.snap.Load()
	return sn.source, sn.version
}

// shortVersion is the first 12 characters of a fingerprint.
func shortVersion(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// handleConfigDump answers /rlconfig: the configuration in force as
// text. Its first lines give the source, version and load time; then one
// line per limit, "DOMAIN.PATH: unit=UNIT requests_per_unit=N,
// shadow_mode: B, quota_mode: B" for Envoy domains (envoyproxy/ratelimit's
// /rlconfig lines, with ratewarden's descriptor paths), "policy NAME:
// LIMIT" for native policies ("policy NAME: max_in_flight N, ttl D" for a
// concurrency policy), sorted.
func (s *Server) handleConfigDump(w http.ResponseWriter, _ *http.Request) {
	sn := s.snap.Load()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b strings.Builder
	fmt.Fprintf(&b, "# source: %s\n# version: %s\n# loaded: %s\n", sn.source, sn.version, sn.loaded.UTC().Format(time.RFC3339))
	var lines []string
	for name, p := range sn.cfg.Policies {
		if p.Concurrency != nil {
			lines = append(lines, fmt.Sprintf("policy %s: %s", name, p.Concurrency))
			continue
		}
		lines = append(lines, fmt.Sprintf("policy %s: %s, shadow_mode: %t", name, p.Limit, p.Shadow))
	}
	for name, d := range sn.cfg.Domains {
		var walk func([]*svcconfig.Descriptor)
		walk = func(ds []*svcconfig.Descriptor) {
			for _, n := range ds {
				if rl := n.RateLimit; rl != nil {
					unit := strings.ToUpper(rl.Unit)
					if rl.Unlimited {
						unit = "UNLIMITED"
					}
					lines = append(lines, fmt.Sprintf("%s.%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t",
						name, n.Path, unit, rl.RequestsPerUnit, n.Shadow, n.QuotaMode || s.envoy.QuotaMode))
				}
				walk(n.Descriptors)
			}
		}
		walk(d.Descriptors)
	}
	slices.Sort(lines)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	_, _ = w.Write([]byte(b.String()))
}
