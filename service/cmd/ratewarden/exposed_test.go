package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// process is a real `ratewarden serve` process, built from this package.
type process struct {
	cmd        *exec.Cmd
	http, adm  string
	logs       *syncBuffer
	binaryPath string
}

// startProcess builds the binary and runs `ratewarden serve` with args on
// free loopback ports until the test ends.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	return startProcessEnv(t, nil, args...)
}

// startProcessEnv is startProcess with env ("NAME=value") added to this
// process's environment.
func startProcessEnv(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "ratewarden")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := &process{logs: &syncBuffer{}, binaryPath: bin}
	p.cmd = exec.Command(bin, append([]string{"serve", "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	p.cmd.Env = append(append(os.Environ(), "RATEWARDEN_API_TOKEN="), env...)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve exited: %v; logs:\n%s", err, p.logs.String())
			}
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			<-done
			t.Errorf("serve did not stop within a minute of SIGINT")
		}
	})
	re := regexp.MustCompile(`"msg":"listening","http":"([^"]+)","grpc":"[^"]+"(?:,"admin":"([^"]+)")?`)
	deadline := time.Now().Add(time.Minute)
	for p.http == "" {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not log \"listening\" within a minute; logs:\n%s", p.logs.String())
		}
		if m := re.FindStringSubmatch(p.logs.String()); m != nil {
			p.http, p.adm = m[1], m[2]
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p
}

// rss is the process's resident set size (VmRSS in /proc/<pid>/status).
func (p *process) rss(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	switch {
	case err != nil && runtime.GOOS == "linux":
		t.Fatalf("the service's /proc status: %v", err) // Linux has it: a missing one is a failure, not a reason to skip
	case err != nil:
		t.Skipf("no /proc on %s to read the service's memory from: %v", runtime.GOOS, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// send posts body to the process and returns the status and body.
func send(t *testing.T, c *http.Client, url, contentType, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestExposedProcess runs the real binary: inline limits off by default,
// strict parsing, and 2000 distinct 60 KB keys refused with the process's
// RSS growing by less than 10 MB (VmRSS, after a warm-up). The process
// runs with --gc-headroom 0: the RSS stands for what is kept, and with the
// default headroom garbage grows the heap by up to 64 MiB before a
// collection, whatever is kept.
func TestExposedProcess(t *testing.T) {
	p := startProcess(t, "--gc-headroom", "0")
	c := &http.Client{}
	defer c.CloseIdleConnections()
	url := "http://" + p.http
	hostile := `{"key":"sl-1","limit":"10000/366d sliding_log","cost":10000}`
	if code, body := send(t, c, url+"/v1/check", "application/json", hostile); code != 403 || !strings.Contains(body, "--inline-limits") {
		t.Fatalf("hostile inline limit: %d %s", code, body)
	}
	if code, body := send(t, c, url+"/v1/check", "text/plain", `{"key":"k","policy":"default"}`); code != 415 || !strings.Contains(body, "unsupported-media-type") {
		t.Fatalf("text/plain: %d %s", code, body)
	}
	if code, body := send(t, c, url+"/v1/check", "application/json", `{"key":"k","key":"j","policy":"default"}`); code != 400 || !strings.Contains(body, "given twice") {
		t.Fatalf("duplicate key: %d %s", code, body)
	}
	if code, body := send(t, c, url+"/v1/check", "application/json; charset=utf-8", `{"key":"k","policy":"default"}`); code != 200 {
		t.Fatalf("a good request: %d %s", code, body)
	}

	key := []byte(strings.Repeat("k", 60_000))
	req := func(i int) (int, string) {
		copy(key, fmt.Sprintf("%08d", i))
		return send(t, c, url+"/v1/check", "application/json", `{"key":"`+string(key)+`","policy":"default"}`)
	}
	for i := range 50 { // warm-up: buffers and pools reach their size
		req(1_000_000 + i)
	}
	before := p.rss(t)
	for i := range 2000 {
		if code, body := req(i); code != 400 || !strings.Contains(body, "the cap is 1024 bytes") {
			t.Fatalf("key %d: %d %.200s", i, code, body)
		}
	}
	after := p.rss(t)
	t.Logf("serve VmRSS: %d -> %d KiB (%+d KiB) after 2000 distinct 60 KB keys", before>>10, after>>10, (after-before)>>10)
	if after-before >= 10<<20 {
		t.Errorf("RSS grew by %d bytes, want < 10 MB", after-before)
	}
}

// TestExposedProcessFlags: --inline-limits turns them on within the
// default maxima, --max-key-bytes sets the cap and --admin-addr moves
// /metrics off the API address.
func TestExposedProcessFlags(t *testing.T) {
	p := startProcess(t, "--inline-limits", "--max-key-bytes", "16", "--admin-addr", "127.0.0.1:0")
	c := &http.Client{}
	defer c.CloseIdleConnections()
	url := "http://" + p.http
	if code, body := send(t, c, url+"/v1/check", "application/json", `{"key":"sl-1","limit":"10000/366d sliding_log","cost":10000}`); code != 400 || !strings.Contains(body, "max_period") {
		t.Fatalf("hostile inline limit: %d %s", code, body)
	}
	if code, body := send(t, c, url+"/v1/check", "application/json", `{"key":"k","limit":"10/1m"}`); code != 200 {
		t.Fatalf("inline limit within the maxima: %d %s", code, body)
	}
	if code, body := send(t, c, url+"/v1/check", "application/json", `{"key":"0123456789abcdefg","policy":"default"}`); code != 400 || !strings.Contains(body, "the cap is 16 bytes") {
		t.Fatalf("key over 16 bytes: %d %s", code, body)
	}
	if p.adm == "" {
		t.Fatalf("no admin address in the log:\n%s", p.logs.String())
	}
	for _, tc := range []struct {
		url  string
		want int
	}{{url + "/metrics", 404}, {"http://" + p.adm + "/metrics", 200}, {"http://" + p.adm + "/readyz", 200}, {url + "/readyz", 200}} {
		resp, err := c.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s: %d, want %d", tc.url, resp.StatusCode, tc.want)
		}
	}
}

// TestGCHeadroom: serve paces its collector by --gc-headroom (64 MiB by
// default) unless GOGC is set, as its /metrics' go_gc_gogc_percent shows.
func TestGCHeadroom(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      []string
		args     []string
		min, max float64
	}{
		// 64 MiB over a heap of 4 MiB or more.
		{"default", []string{"GOGC="}, nil, 101, 1600},
		{"--gc-headroom 0", []string{"GOGC="}, []string{"--gc-headroom", "0"}, 100, 100},
		{"GOGC=300", []string{"GOGC=300"}, nil, 300, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProcessEnv(t, tc.env, tc.args...)
			c := &http.Client{}
			defer c.CloseIdleConnections()
			resp, err := c.Get("http://" + p.http + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			body := string(b)
			m := regexp.MustCompile(`(?m)^go_gc_gogc_percent (\S+)$`).FindStringSubmatch(body)
			if m == nil {
				t.Fatalf("no go_gc_gogc_percent in /metrics:\n%s", body)
			}
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil || v < tc.min || v > tc.max {
				t.Fatalf("go_gc_gogc_percent %s, want %v to %v", m[1], tc.min, tc.max)
			}
		})
	}
}
