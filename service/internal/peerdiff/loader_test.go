package peerdiff

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gostats "github.com/lyft/gostats"

	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
)

// peerLoads reports whether envoyproxy/ratelimit's loader takes the files
// (as one configuration), and its error when not.
func peerLoads(files []string, merge bool) (err error) {
	defer func() { // the loader reports problems by panicking
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	var cs []config.RateLimitConfigToLoad
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		cs = append(cs, config.RateLimitConfigToLoad{Name: f, ConfigYaml: config.ConfigFileContentToYaml(f, string(b))})
	}
	st := stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), settings.NewSettings())
	config.NewRateLimitConfigImpl(cs, st, merge)
	return nil
}

// loaderDeliberate are the files the two loaders judge differently on
// purpose (docs/service.md), by directory and name, pinned: which of the
// two accepts the file, and what the refusing one says. Every document
// of a file is loaded here (the peer reads the first only), keys and
// values are not joined with "_", and ratewarden's extensions and native
// documents are its own.
var loaderDeliberate = map[string]struct {
	why        string
	oursAccept bool     // and the peer refuses; else the other way round
	refusal    []string // one of them in the refusing loader's message
}{
	"loader/two_documents.yaml":        {"the second document is loaded (and refused), not ignored", false, []string{`unknown key "bogus"`}},
	"invalid/duplicate_domain.yaml":    {"the second document is loaded (a duplicate domain), not ignored", false, []string{`domain "edge" is already defined`}},
	"loader/underscore_collision.yaml": {"key a_b value c and key a value b_c are two descriptors", true, []string{"duplicate descriptor composite key 'd.a_b_c'"}},
	// The peer names the first unknown key it meets in a document, in
	// Go's map order, which changes from run to run.
	"config/envoy-example.yaml": {"ratewarden's extensions (algorithm, burst)", true, []string{"unknown key 'algorithm'", "unknown key 'burst'"}},
	"config/ratewarden.yaml":    {"a native document", true, []string{"unknown key 'failure_policy'", "unknown key 'policies'"}},
}

// names reports whether msg contains one of the pinned refusals.
func names(msg string, refusals []string) bool {
	for _, r := range refusals {
		if strings.Contains(msg, r) {
			return true
		}
	}
	return false
}

// TestLoaderAcceptance: `ratewarden config validate` accepts exactly the
// files envoyproxy/ratelimit's loader accepts, but for the deliberate
// differences: the peer's own test and example configs, the service's
// fixtures and this package's edge cases, one file at a time and the
// peer's merge pair with and without merging.
func TestLoaderAcceptance(t *testing.T) {
	_, ours := build(t, t.TempDir())
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/envoyproxy/ratelimit").Output()
	if err != nil {
		t.Fatal(err)
	}
	peerDir := strings.TrimSpace(string(out))
	var files []string
	for _, g := range []string{
		filepath.Join(peerDir, "test", "config", "*.yaml"),
		filepath.Join(peerDir, "examples", "ratelimit", "config", "*.yaml"),
		filepath.Join(peerDir, "test", "integration", "runtime", "current", "ratelimit", "*", "*.yaml"),
		filepath.Join("..", "..", "config", "testdata", "invalid", "*.yaml"),
		filepath.Join("..", "..", "server", "testdata", "*.yaml"),
		filepath.Join("..", "..", "..", "examples", "config", "*.yaml"),
		filepath.Join("testdata", "*.yaml"),
		filepath.Join("testdata", "loader", "*.yaml"),
	} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 60 {
		t.Fatalf("%d config files found, want at least 60", len(files))
	}
	check := func(name string, fs []string, merge bool) {
		peerErr := peerLoads(fs, merge)
		args := []string{"config", "validate"}
		if merge {
			args = append(args, "--merge-domains")
		}
		ourOut, ourErr := exec.Command(ours, append(args, fs...)...).CombinedOutput()
		d, listed := loaderDeliberate[filepath.Join(filepath.Base(filepath.Dir(name)), filepath.Base(name))]
		switch {
		case listed:
			refusal := string(ourOut)
			if d.oursAccept && peerErr != nil {
				refusal = peerErr.Error()
			}
			if (ourErr == nil) != d.oursAccept || (peerErr == nil) == d.oursAccept || !names(refusal, d.refusal) {
				t.Errorf("%s, a deliberate difference (%s), judged otherwise than pinned (ratewarden accepts: %v; the refusal names %q):\n  envoyproxy/ratelimit: %v\n  ratewarden: %v\n%s",
					name, d.why, d.oursAccept, d.refusal, peerErr, ourErr, ourOut)
				return
			}
			t.Logf("%s: differs on purpose, as pinned: %s", name, d.why)
		case (peerErr == nil) != (ourErr == nil):
			t.Errorf("%s: envoyproxy/ratelimit: %v; ratewarden: %v\n%s", name, peerErr, ourErr, ourOut)
		}
	}
	for _, f := range files {
		check(f, []string{f}, false)
	}
	pair := []string{filepath.Join(peerDir, "test", "config", "merge_domain_key1.yaml"), filepath.Join(peerDir, "test", "config", "merge_domain_key2.yaml")}
	check("merge pair", pair, false)
	check("merge pair, merged", pair, true)
	t.Logf("%d files, each judged alike but for the deliberate differences", len(files))
}
