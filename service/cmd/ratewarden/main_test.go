package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden/internal/testredis"
)

func TestMain(m *testing.M) {
	// After a failed connect (TestServeRejectsBadFlags dials a closed
	// port), rueidis keeps one goroutine sleeping out its ~0.5 s
	// reconnect delay; it ends by itself.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
}

func noenv(string) string { return "" }

func TestConfigValidate(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"config", "validate", filepath.Join("..", "..", "..", "examples", "config")}, &out, &errb, noenv); code != 0 {
		t.Fatalf("valid examples: exit %d: %s %s", code, out.String(), errb.String())
	}
	if !strings.HasPrefix(out.String(), "OK: 4 policies, 2 domains") {
		t.Errorf("output %q", out.String())
	}
	out.Reset()
	bad := filepath.Join("..", "..", "config", "testdata", "invalid", "many_problems.yaml")
	if code := run(context.Background(), []string{"config", "validate", bad}, &out, &errb, noenv); code != 1 {
		t.Fatalf("invalid: exit %d", code)
	}
	if n := strings.Count(out.String(), "many_problems.yaml:"); n != 3 {
		t.Errorf("want 3 problems with file:line, got:\n%s", out.String())
	}
	if code := run(context.Background(), []string{"nope"}, &out, &errb, noenv); code != 2 {
		t.Errorf("unknown command: exit %d", code)
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
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no listening line in the logs:\n%s", logs.String())
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
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
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
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var out, errb bytes.Buffer
		code := run(ctx, []string{"serve", "--redis", "redis://" + rs.Addr, "--redis-timeout", d,
			"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}, &out, &errb, noenv)
		cancel()
		if code != 1 || !strings.Contains(errb.String(), "ratewarden serve: --redis-timeout "+strconv.Quote(d)+": want a duration > 0") {
			t.Errorf("--redis-timeout %s: exit %d, want 1 with a clear error; stderr:\n%s", d, code, errb.String())
		}
	}
}
