// Package doccheck runs the commands and programs shown in README.md and
// docs/*.md and compares what they print with what the documents show, so
// the documents cannot drift from the program.
//
// # Markers
//
// A block is checked when an HTML comment line (invisible on GitHub) comes
// right before its fence; blank lines may sit between them:
//
//	<!-- doccheck: run -->      the next ```sh or ```go block is run
//	<!-- doccheck: output -->   the next fenced block is what the run block
//	                            just before it prints (stdout and stderr
//	                            together, as a terminal shows them)
//	<!-- doccheck: output exit=1 -->  ... and it exits with status 1
//	<!-- doccheck: start -->    the next ```sh block starts the service and
//	                            keeps running (as `make run` does in a
//	                            terminal) until the next start block or the
//	                            end of the document; the test waits until
//	                            its /readyz answers 200
//	<!-- doccheck: config -->   the next ```yaml block is a configuration:
//	                            `bin/ratewarden config validate` must accept it
//	<!-- doccheck: skip REASON -->  the next block is not run, for REASON
//
// Every ```sh and ```go block must carry a marker (skip with a reason when
// it cannot run here), so a new command cannot be added unchecked.
//
// # How blocks run
//
// The sh blocks of one document run one after the other, in order, so a
// later block sees what an earlier one did (the service it started, the
// requests it made). Each document has free loopback ports and a
// redis-server of its own (started by internal/testredis), and documents
// run in parallel. Go blocks do not depend on each other: each runs on a
// fresh redis-server of its own, in parallel with the rest.
//
//   - sh blocks run with `bash -e -o pipefail` from the repository root. A
//     run block must exit 0 unless its output marker says otherwise; without
//     an output block only the exit status is checked.
//   - go blocks are complete programs: each is written to a file outside the
//     tree and run with `go run FILE` from the directory of the module that
//     holds what it imports (the root module, or service/ when it imports
//     the service module), once: an output that differs from the shown one
//     fails. A program whose answer needs Redis to answer within the
//     fallback's deadline sets one that a busy machine meets (the 50 ms
//     default can be missed while the other blocks compile).
//   - A sh run block that is one grpcurl command is not run with grpcurl
//     (not installed here): the test makes the same call with grpc-go and
//     prints the answer as grpcurl does (the JSON form of the response
//     message, indented by two spaces).
//   - Before `make build` and the other make targets run, the test removes
//     make's recursion variables (MAKEFLAGS, MAKELEVEL, ...) from the
//     environment, so a test run under `make test` prints what a terminal
//     shows.
//
// # Addresses
//
// The documents use the default addresses; the test rewrites them in every
// block before it runs, and back in the output before comparing:
// localhost:8080 and 127.0.0.1:8080 (HTTP) and localhost:8081 and
// 127.0.0.1:8081 (gRPC) become the document's free ports, and
// 127.0.0.1:6379 and localhost:6379 the test's redis-server. Shell blocks
// also get RATEWARDEN_HTTP_ADDR, RATEWARDEN_GRPC_ADDR (so `make run` listens
// there), RATEWARDEN_SERVER (the default server of `ratewarden check`) and
// RATEWARDEN_REDIS_TIMEOUT=10s (a busy machine can miss the default 50 ms
// per Redis call, and the failure policy would answer instead);
// go blocks get RATEWARDEN_REDIS_URL. Shell blocks run with TMPDIR set to
// a directory of the test's, shown as /tmp in their output (the demo writes
// its chart there). Nothing listens beyond loopback.
//
// # Placeholders
//
// In an output block, these stand for values that differ between runs:
// <n> a whole number, <decimal> a number with an optional fraction, <port>
// a port, <date> an HTTP date. Spaces right before a placeholder match any
// number of spaces (a right-aligned column). Everything else must match
// exactly, line by line: status lines, every header shown, every JSON field.
//
// # Blocks left unmarked or skipped
//
// `make test` is not run (it is the whole suite, CI itself): its block
// carries a skip marker. Not marked, as they are not sh or go blocks:
// Envoy's filter configuration in docs/service.md (it needs Envoy), the
// Redis URL forms (a grammar, not a command) and the README's layout.
// Benchmarks (`make bench`, `make bench-peers`, `go test -bench`) appear
// only inline, not as blocks: minutes of load, and their numbers vary.
// docs/demo.md need not mark its blocks (its owner is rewriting it); the
// blocks it marks run.
package doccheck

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// unmarkedAllowed lists documents whose sh and go blocks need no marker.
var unmarkedAllowed = map[string]string{
	"docs/demo.md": "owned by another change in progress; its marked blocks still run",
}

// repoRoot is the repository root: this package is service/internal/doccheck.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "service", "go.mod")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	return root
}

// documents returns README.md and docs/*.md, relative to root.
func documents(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	sort.Strings(files[1:])
	return files
}

// TestDocs runs every marked block of every document.
func TestDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs every program of the docs against Redis; make test runs it")
	}
	start := time.Now()
	root := repoRoot(t)
	type doc struct {
		file   string
		blocks []*block
	}
	var docs []doc
	for _, f := range documents(t, root) {
		text, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		blocks, loose, err := parse(f, string(text))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := unmarkedAllowed[f]; !ok {
			for _, u := range loose {
				t.Errorf("%s:%d: a %s block without a doccheck marker: mark it run (or start), or skip it with a reason", f, u.line, u.lang)
			}
		}
		docs = append(docs, doc{f, blocks})
	}

	s := newSuite(t, root)
	for _, d := range docs {
		if len(d.blocks) == 0 {
			continue
		}
		t.Run(d.file, func(t *testing.T) {
			t.Parallel()
			s.runDoc(t, d.file, d.blocks)
		})
	}
	t.Cleanup(func() { t.Logf("documents checked in %v", time.Since(start).Round(time.Millisecond)) })
}

// suite is what every document shares: the repository and the
// ratewarden binary.
type suite struct {
	root string
	bin  string // root/bin/ratewarden, built by `make build`
}

func newSuite(t *testing.T, root string) *suite {
	t.Helper()
	s := &suite{root: root, bin: filepath.Join(root, "bin", "ratewarden")}
	// The binary the documents call bin/ratewarden, built the documented
	// way (once; the documents' own `make build` finds it up to date).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "build")
	cmd.Dir = root
	cmd.Env = cleanEnv(nil)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	return s
}

// cleanEnv is the test's environment without RATEWARDEN_* settings and
// make's recursion variables, plus extra.
func cleanEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "RATEWARDEN_"),
			k == "MAKEFLAGS", k == "MFLAGS", k == "MAKELEVEL", k == "MAKEOVERRIDES",
			k == "MAKE_TERMOUT", k == "MAKE_TERMERR", k == "GNUMAKEFLAGS":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}
