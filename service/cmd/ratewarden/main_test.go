package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/server/api"
)

func TestMain(m *testing.M) {
	// After a failed connect (TestServeRejectsBadFlags dials a closed
	// port), rueidis keeps one goroutine sleeping out its ~0.5 s
	// reconnect delay; it ends by itself.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
}

func noenv(string) string { return "" }

// runArgs runs the command line args with no environment.
func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb, noenv)
	return code, out.String(), errb.String()
}

// writeFile writes a file named name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigValidate(t *testing.T) {
	code, out, errs := runArgs("config", "validate", filepath.Join("..", "..", "..", "examples", "config"))
	if code != 0 || !strings.HasPrefix(out, "OK: 5 policies, 2 domains in ") {
		t.Fatalf("valid examples: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	bad := filepath.Join("..", "..", "config", "testdata", "invalid", "many_problems.yaml")
	code, out, errs = runArgs("config", "validate", bad)
	if code != 1 || errs != "3 problems\n" {
		t.Fatalf("invalid: exit %d, stderr %q, want 1 and \"3 problems\"", code, errs)
	}
	if n := strings.Count(out, "many_problems.yaml:"); n != 3 {
		t.Errorf("want 3 problems with file:line, got:\n%s", out)
	}
	if code, _, _ := runArgs("nope"); code != 2 {
		t.Errorf("unknown command: exit %d", code)
	}
}

// TestConfigValidateCounts: the counts are in words of the right number,
// in exactly the format the docs show.
func TestConfigValidateCounts(t *testing.T) {
	dir := t.TempDir()
	domain := func(name string) string {
		return "---\ndomain: " + name + "\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n"
	}
	one := writeFile(t, dir, "one.yaml", "policies:\n  a: 10/1m\n"+domain("edge"))
	a := writeFile(t, dir, "a.yaml", "policies:\n  a: 10/1m\n  b: 5/1s\n"+domain("edge"))
	b := writeFile(t, dir, "b.yaml", "policies:\n  c: 1/1h\n"+domain("envoy"))
	p1 := writeFile(t, dir, "p1.yaml", "policies:\n  a: nope\n")
	p2 := writeFile(t, dir, "p2.yaml", "policies:\n  a: nope\n  b: -1/1m\n")
	for _, tc := range []struct {
		paths          []string
		code           int
		stdout, stderr string
	}{
		{[]string{one}, 0, "OK: 1 policy, 1 domain in " + one + "\n", ""},
		{[]string{a, b}, 0, "OK: 3 policies, 2 domains in " + a + ", " + b + "\n", ""},
		{[]string{p1}, 1, "", "1 problem\n"},
		{[]string{p2}, 1, "", "2 problems\n"},
	} {
		code, out, errs := runArgs(append([]string{"config", "validate"}, tc.paths...)...)
		if code != tc.code || errs != tc.stderr || (tc.stdout != "" && out != tc.stdout) {
			t.Errorf("validate %v: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.paths, code, out, errs, tc.code, tc.stdout, tc.stderr)
		}
	}
}

// TestConfigValidateEnvoyCompat: --merge-domains merges one domain's two
// files, and a key of envoyproxy/ratelimit's format in the wrong place is
// a warning on stdout, not a problem.
func TestConfigValidateEnvoyCompat(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}\n")
	b := writeFile(t, dir, "b.yaml", "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if code, _, errs := runArgs("config", "validate", a, b); code != 1 || errs != "1 problem\n" {
		t.Errorf("two files of domain d: exit %d, stderr %q; want 1, one problem", code, errs)
	}
	code, out, errs := runArgs("config", "validate", "--merge-domains", a, b)
	want := "warning: " + a + `:4: descriptors[0].rate_limit: "shadow_mode" does not belong here and is ignored`
	if code != 0 || !strings.HasPrefix(out, want) || !strings.HasSuffix(out, "OK: 0 policies, 1 domain in "+a+", "+b+"\n") || errs != "" {
		t.Errorf("--merge-domains: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// syncBuffer is a bytes.Buffer safe to write from the server's goroutines
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeAndCheck runs `serve` with the example config on free ports,
// asks it with `check` until the limit is hit, then stops it as SIGTERM
// would (by cancelling its context).
func TestServeAndCheck(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	env := map[string]string{
		"RATEWARDEN_HTTP_ADDR":  "127.0.0.1:0",
		"RATEWARDEN_GRPC_ADDR":  "127.0.0.1:0",
		"RATEWARDEN_API_TOKEN":  "tok",
		"RATEWARDEN_LOG_FORMAT": "json",
	}
	getenv := func(k string) string { return env[k] }
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--config", filepath.Join("..", "..", "..", "examples", "config", "ratewarden.yaml")}, &bytes.Buffer{}, logs, getenv)
	}()
	var addr string
	// A generous cap: startup takes milliseconds, but the machine may be busy.
	deadline := time.Now().Add(time.Minute)
	for addr == "" {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not log \"listening\" within a minute; logs:\n%s", logs.String())
		}
		if m := regexp.MustCompile(`"msg":"listening","http":"([^"]+)"`).FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "deciding in memory on this node only") {
		t.Errorf("startup log does not say it runs in memory:\n%s", logs.String())
	}

	checkArgs := []string{"check", "--server", "http://" + addr, "--policy", "login", "user-1"}
	for i := range 5 {
		var out, errb bytes.Buffer
		if code := run(ctx, checkArgs, &out, &errb, getenv); code != 0 {
			t.Fatalf("check %d: exit %d: %s %s", i, code, out.String(), errb.String())
		}
		var d map[string]any
		if err := json.Unmarshal(out.Bytes(), &d); err != nil || d["allowed"] != true {
			t.Fatalf("check %d: %s (%v)", i, out.String(), err)
		}
	}
	var out, errb bytes.Buffer
	if code := run(ctx, checkArgs, &out, &errb, getenv); code != exitDenied {
		t.Fatalf("6th check: exit %d, want %d: %s", code, exitDenied, out.String())
	}
	// Without the token the server refuses: exit 1 with the problem.
	errb.Reset()
	if code := run(ctx, checkArgs, &out, &errb, noenv); code != 1 || !strings.Contains(errb.String(), "401") {
		t.Fatalf("no token: exit %d: %s", code, errb.String())
	}
	// --reset restores the allowance.
	if code := run(ctx, append([]string{"check", "--reset"}, checkArgs[1:]...), &out, &errb, getenv); code != 0 {
		t.Fatalf("reset: exit %d: %s", code, errb.String())
	}
	if code := run(ctx, checkArgs, &out, &errb, getenv); code != 0 {
		t.Fatalf("after reset: exit %d", code)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d:\n%s", code, logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("serve did not stop within a minute of its context's end; logs:\n%s", logs.String())
	}
}

func TestServeRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--failure-policy", "sometimes"},
		{"serve", "--replicas", "0"},
		{"serve", "--redis-timeout", "soon"},
		{"serve", "--config", filepath.Join("..", "..", "config", "testdata", "invalid", "bad_unit.yaml"), "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"},
		{"serve", "--redis", "redis://127.0.0.1:1", "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb, noenv); code != 1 {
			t.Errorf("%v: exit %d, want 1: %s", args, code, errb.String())
		}
		if !strings.Contains(errb.String(), "ratewarden serve: ") {
			t.Errorf("%v: no clear error: %s", args, errb.String())
		}
	}
}

// TestServeRejectsZeroRedisTimeout: --redis-timeout 0 would make every
// Redis call fail; it is refused at startup with a clear error, even with
// a Redis that answers.
func TestServeRejectsZeroRedisTimeout(t *testing.T) {
	rs := testredis.Start(t)
	for _, d := range []string{"0", "0s", "-1ms"} {
		// The cap only ends a serve that wrongly started; the check is
		// refused at once.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var out, errb bytes.Buffer
		code := run(ctx, []string{"serve", "--redis", "redis://" + rs.Addr, "--redis-timeout", d,
			"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}, &out, &errb, noenv)
		cancel()
		if code != 1 || !strings.Contains(errb.String(), "ratewarden serve: --redis-timeout "+strconv.Quote(d)+": want a duration > 0") {
			t.Errorf("--redis-timeout %s: exit %d, want 1 with a clear error; stderr:\n%s", d, code, errb.String())
		}
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		pos    []string
		policy string
		peek   bool
	}{
		{[]string{"user:7", "--policy", "api"}, []string{"user:7"}, "api", false},
		{[]string{"--policy", "api", "user:7"}, []string{"user:7"}, "api", false},
		{[]string{"a", "-peek", "b", "-policy=x", "c"}, []string{"a", "b", "c"}, "x", true},
		{[]string{"--peek", "--", "--policy", "x"}, []string{"--policy", "x"}, "", true},
		{[]string{"--policy", "--", "k"}, []string{"k"}, "--", false}, // a flag's value may be "--"
		{[]string{"-", "--peek=false"}, []string{"-"}, "", false},
		{nil, nil, "", false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		policy := fs.String("policy", "", "")
		peek := fs.Bool("peek", false, "")
		pos, err := parseArgs(fs, tc.args)
		if err != nil || !slices.Equal(pos, tc.pos) || *policy != tc.policy || *peek != tc.peek {
			t.Errorf("parseArgs(%q) = %q, %v; policy %q, peek %v; want %q, policy %q, peek %v",
				tc.args, pos, err, *policy, *peek, tc.pos, tc.policy, tc.peek)
		}
	}
	for _, args := range [][]string{{"k", "--nope"}, {"k", "--policy"}, {"--peek=maybe"}} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("policy", "", "")
		fs.Bool("peek", false, "")
		if _, err := parseArgs(fs, args); err == nil {
			t.Errorf("parseArgs(%q): no error", args)
		}
	}
}

// checkServer answers /v1/check like a ratewarden server: allowed unless
// the key is "deny". It records the requests it got.
func checkServer(t *testing.T) (*httptest.Server, *[]api.CheckRequest) {
	var mu sync.Mutex
	var got []api.CheckRequest
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.CheckRequest
		if r.URL.Path != "/v1/check" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(api.Decision{Allowed: req.Key != "deny"})
	}))
	t.Cleanup(ts.Close)
	return ts, &got
}

// TestFlagsAfterArguments: flags may follow the positional arguments in
// every command, and "--" ends them.
func TestFlagsAfterArguments(t *testing.T) {
	ts, got := checkServer(t)
	for _, tc := range []struct {
		args     []string
		code     int
		key, pol string
	}{
		{[]string{"check", "user:7", "--policy", "api", "--server", ts.URL}, 0, "user:7", "api"},
		{[]string{"check", "--policy", "api", "--server", ts.URL, "user:7"}, 0, "user:7", "api"},
		{[]string{"check", "--server", ts.URL, "deny", "--policy", "api"}, exitDenied, "deny", "api"},
		{[]string{"check", "--server", ts.URL, "--", "--policy"}, 0, "--policy", ""},
	} {
		*got = nil
		code, out, errs := runArgs(tc.args...)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d; stdout %q, stderr %q", tc.args, code, tc.code, out, errs)
			continue
		}
		if len(*got) != 1 || (*got)[0].Key != tc.key || (*got)[0].Policy != tc.pol {
			t.Errorf("%q: server got %+v, want one check of key %q, policy %q", tc.args, *got, tc.key, tc.pol)
		}
	}
	examples := filepath.Join("..", "..", "..", "examples", "config")
	if code, out, errs := runArgs("config", "validate", examples, "--help"); code != 0 || !strings.HasPrefix(out, "usage: ratewarden config validate") || errs != "" {
		t.Errorf("config validate PATH --help: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, _ := runArgs("config", "validate", "--", examples); code != 0 || !strings.HasPrefix(out, "OK: ") {
		t.Errorf("config validate -- PATH: exit %d, stdout %q", code, out)
	}
	if code, _, errs := runArgs("demo", "extra", "--replicas", "0"); code != 2 || !strings.Contains(errs, "unexpected arguments") {
		t.Errorf("demo extra --replicas 0: exit %d, stderr %q", code, errs)
	}
}

// TestHelp: -h, -help and --help print the command's usage, with every
// exit status it returns, on stdout and exit 0.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		cmd   []string
		usage string
		exits []string
	}{
		{nil, "usage: ratewarden <command>", []string{"0  success", "1  error", "2  usage error", "3  check: over the limit"}},
		{[]string{"serve"}, "usage: ratewarden serve [flags]", []string{"0  stopped", "1  error", "2  usage error"}},
		{[]string{"check"}, "usage: ratewarden check [flags] KEY", []string{"0  allowed", "1  error", "2  usage error", "3  over the limit"}},
		{[]string{"config"}, "usage: ratewarden config <command>", []string{"0  valid", "1  invalid", "2  usage error"}},
		{[]string{"config", "validate"}, "usage: ratewarden config validate [flags] PATH...", []string{"0  valid", "1  invalid", "2  usage error"}},
		{[]string{"demo"}, "usage: ratewarden demo [flags]", []string{"0  done", "1  failed", "2  usage error"}},
		{[]string{"version"}, "usage: ratewarden version", []string{"0  printed", "2  usage error"}},
	} {
		for _, h := range []string{"-h", "-help", "--help"} {
			args := append(slices.Clone(tc.cmd), h)
			code, out, errs := runArgs(args...)
			if code != 0 || errs != "" || !strings.HasPrefix(out, tc.usage) {
				t.Errorf("%q: exit %d, stderr %q, stdout %q; want 0 and usage on stdout", args, code, errs, out)
				continue
			}
			_, exits, ok := strings.Cut(out, "\nexit status:\n")
			for _, e := range tc.exits {
				if !ok || !strings.Contains(exits, "  "+e) {
					t.Errorf("%q: usage does not list exit status %q:\n%s", args, e, out)
				}
			}
		}
	}
	if code, out, _ := runArgs("help"); code != 0 || !strings.Contains(out, "ratewarden <command>") || !strings.Contains(out, "version") {
		t.Errorf("help: exit %d: %s", code, out)
	}
}

// TestUsageErrors: a usage error says what is wrong and where the usage
// is, on stderr, with exit 2 and nothing on stdout.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the whole first line
	}{
		{[]string{"check"}, "ratewarden check: want one KEY, got 0 arguments"},
		{[]string{"check", "a", "b"}, "ratewarden check: want one KEY, got 2 arguments"},
		{[]string{"check", "k", "--nope"}, "ratewarden check: flag provided but not defined: -nope"},
		{[]string{"check", "k", "--cost", "x"}, `ratewarden check: invalid value "x" for flag -cost: parse error`},
		{[]string{"check", "k", "--policy"}, "ratewarden check: flag needs an argument: -policy"},
		{[]string{"serve", "extra"}, `ratewarden serve: unexpected arguments ["extra"]`},
		{[]string{"config"}, "ratewarden config: want a command: validate"},
		{[]string{"config", "nope"}, `ratewarden config: unknown command "nope"; want validate`},
		{[]string{"config", "validate"}, "ratewarden config validate: want at least one PATH"},
		{[]string{"version", "extra"}, `ratewarden version: unexpected arguments ["extra"]`},
		{[]string{"demo", "--nope"}, "ratewarden demo: flag provided but not defined: -nope"},
	} {
		code, out, errs := runArgs(tc.args...)
		cmd := strings.TrimPrefix(strings.SplitN(tc.want, ":", 2)[0], "ratewarden ")
		want := tc.want + "\nRun \"ratewarden " + cmd + " -h\" for usage.\n"
		if code != 2 || out != "" || errs != want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2, nothing, %q", tc.args, code, out, errs, want)
		}
	}
	if code, out, errs := runArgs(); code != 2 || out != "" || !strings.HasPrefix(errs, "usage: ratewarden <command>") {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, errs := runArgs(args...)
		// A test binary records no VCS information; it must say so, not fail.
		if code != 0 || errs != "" || !strings.HasPrefix(out, "ratewarden ") || !strings.Contains(out, "\nrevision:  ") ||
			!strings.Contains(out, "\ngo:        "+runtime.Version()+" ") {
			t.Errorf("%q: exit %d, stderr %q, stdout:\n%s", args, code, errs, out)
		}
	}
	vcs := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "github.com/ratewarden/ratewarden/service", Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
				{Key: "vcs.time", Value: "2026-05-01T12:00:00Z"}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, tc := range []struct {
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{vcs("false"), true, "ratewarden v1.2.3\nrevision:  0123456789abcdef0123456789abcdef01234567 (clean)\ncommitted: 2026-05-01T12:00:00Z\ngo:        go1.26.1 linux/amd64\n"},
		{vcs("true"), true, "ratewarden v1.2.3\nrevision:  0123456789abcdef0123456789abcdef01234567 (modified: built with uncommitted changes)\ncommitted: 2026-05-01T12:00:00Z\ngo:        go1.26.1 linux/amd64\n"},
		{&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}}, true,
			"ratewarden (devel)\nrevision:  unknown (no VCS information recorded: go run, go test, -buildvcs=false or a build outside a checkout)\ngo:        go1.26.1 linux/amd64\n"},
		{nil, false, "ratewarden (devel)\nrevision:  unknown (the binary carries no build information)\ngo:        " + runtime.Version() + " linux/amd64\n"},
	} {
		if got := versionText(tc.info, tc.ok, "linux/amd64"); got != tc.want {
			t.Errorf("versionText:\n%s\nwant:\n%s", got, tc.want)
		}
	}
}

// TestServeWarnsOnlyWhenRunning: the in-memory warning comes once the
// service listens, never before a fatal startup error.
func TestServeWarnsOnlyWhenRunning(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, args := range [][]string{
		{"serve", "--config", filepath.Join("..", "..", "config", "testdata", "invalid", "bad_unit.yaml"), "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"},
		{"serve", "--http-addr", busy.Addr().String(), "--grpc-addr", "127.0.0.1:0"},
		{"serve", "--http-addr", "127.0.0.1:0", "--grpc-addr", busy.Addr().String()},
	} {
		code, _, errs := runArgs(args...)
		if code != 1 || !strings.Contains(errs, "ratewarden serve: ") {
			t.Errorf("%q: exit %d, want 1 with an error; stderr:\n%s", args, code, errs)
		}
		if strings.Contains(errs, "deciding in memory") {
			t.Errorf("%q: warned about deciding in memory before failing to start:\n%s", args, errs)
		}
	}
}
