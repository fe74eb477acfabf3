//go:build linux

package peerdiff

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratewarden/ratewarden/internal/testredis"
)

// loadConfig has one limit per caller key, high enough never to deny, so
// every service does the same work on every request.
const loadConfig = "domain: load\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n"

// The load: callers sending requests at once over conns connections per
// service, each caller perCaller requests after warm requests that are
// not measured.
const (
	loadCallers = 64
	loadConns   = 4
	loadWarm    = 50
)

// TestLoadRatio (set PEERDIFF_LOAD=1) puts the services under the same
// gRPC load, one after the other, and logs for each its rate, latency
// percentiles and CPU time per request (its own process's, and its
// redis-server's), with the medians of the repetitions and their ratios:
//
//   - Redis-backed: envoyproxy/ratelimit, ratewarden serve --redis, and
//     barerls -redis (the library's Redis stack behind a bare handler),
//     each on a redis-server of its own;
//   - in memory: ratewarden serve without Redis, and barerls (memstore
//     behind the same bare handler).
//
// 64 callers on 4 connections; each mode runs with a descriptor per
// caller ("keys") and with every caller on one hot descriptor ("hot").
// The repetitions interleave the services, each starting with the next
// one. PEERDIFF_LOAD_REPS (default 3)
// sets the repetitions, PEERDIFF_LOAD_N (default 1000) the requests per
// caller, PEERDIFF_LOAD_MODES (default "redis-keys,redis-hot,memory-keys,
// memory-hot") which modes run, and PEERDIFF_LOAD_BASELINE, the path of
// another ratewarden binary (an earlier commit's, say), adds it to every
// mode. ratewarden runs with --rls-headers none, as envoyproxy/ratelimit
// answers by default. It asserts nothing about speed, only that every
// request was answered: the numbers are for docs/performance.md.
func TestLoadRatio(t *testing.T) {
	if os.Getenv("PEERDIFF_LOAD") == "" {
		t.Skip("set PEERDIFF_LOAD=1 to measure")
	}
	reps, perCaller := envInt(t, "PEERDIFF_LOAD_REPS", 3), envInt(t, "PEERDIFF_LOAD_N", 1000)
	modes := strings.Split(os.Getenv("PEERDIFF_LOAD_MODES"), ",")
	if modes[0] == "" {
		modes = []string{"redis-keys", "redis-hot", "memory-keys", "memory-hot"}
	}
	dir := t.TempDir()
	peerBin, ourBin := build(t, dir)
	bareBin := filepath.Join(dir, "barerls")
	bc := exec.Command("go", "build", "-o", bareBin, ".")
	bc.Dir = "barerls" // a module of its own: the service's gRPC
	if out, err := bc.CombinedOutput(); err != nil {
		t.Fatalf("build barerls: %v\n%s", err, out)
	}
	rt := t.TempDir()
	cfgDir := filepath.Join(rt, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "load.yaml"), []byte(loadConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	need := func(backend string) bool {
		return slices.ContainsFunc(modes, func(m string) bool { return strings.HasPrefix(m, backend+"-") })
	}
	baseline := os.Getenv("PEERDIFF_LOAD_BASELINE")
	// serve runs ratewarden (bin) on cfgDir, on redisURL ("": in memory).
	serve := func(bin, redisURL string) (*exec.Cmd, string) {
		addr := freeAddr(t)
		args := []string{"serve", "--config", cfgDir, "--http-addr", freeAddr(t), "--grpc-addr", addr, "--log-level", "warn", "--rls-headers", "none"}
		if redisURL != "" {
			args = append(args, "--redis", redisURL)
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		return cmd, addr
	}
	// Each mode's services: ratewarden first, then what it is compared with.
	var redisSvcs, memSvcs []*loadService
	if need("redis") {
		peerRedis, ourRedis, bareRedis := testredis.Start(t), testredis.Start(t), testredis.Start(t)
		pg, ph, pd := freeAddr(t), freeAddr(t), freeAddr(t)
		pc := exec.Command(peerBin)
		pc.Env = []string{"PATH=" + os.Getenv("PATH"), "USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp",
			"REDIS_URL=" + peerRedis.Addr, "RUNTIME_ROOT=" + rt, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
			"RUNTIME_WATCH_ROOT=false", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
			"GRPC_PORT=" + port(pg), "PORT=" + port(ph), "DEBUG_PORT=" + port(pd)}
		oc, og := serve(ourBin, "redis://"+ourRedis.Addr)
		bg := freeAddr(t)
		bc := exec.Command(bareBin, "-addr", bg, "-redis", "redis://"+bareRedis.Addr)
		redisSvcs = []*loadService{
			startLoad(t, "ratewarden", oc, og, ourRedis),
			startLoad(t, "envoyproxy/ratelimit", pc, pg, peerRedis),
			startLoad(t, "library (bare)", bc, bg, bareRedis),
		}
		if baseline != "" {
			baseRedis := testredis.Start(t)
			c, a := serve(baseline, "redis://"+baseRedis.Addr)
			redisSvcs = append(redisSvcs, startLoad(t, "ratewarden (baseline)", c, a, baseRedis))
		}
	}
	if need("memory") {
		oc, og := serve(ourBin, "")
		bg := freeAddr(t)
		memSvcs = []*loadService{
			startLoad(t, "ratewarden", oc, og, nil),
			startLoad(t, "library (bare)", exec.Command(bareBin, "-addr", bg), bg, nil),
		}
		if baseline != "" {
			c, a := serve(baseline, "")
			memSvcs = append(memSvcs, startLoad(t, "ratewarden (baseline)", c, a, nil))
		}
	}
	svcsOf := func(mode string) []*loadService {
		if strings.HasPrefix(mode, "memory-") {
			return memSvcs
		}
		return redisSvcs
	}
	results := map[string][][]loadResult{} // mode -> service -> repetitions
	for rep := range reps {
		for _, mode := range modes {
			svcs := svcsOf(mode)
			if results[mode] == nil {
				results[mode] = make([][]loadResult, len(svcs))
			}
			hot := strings.HasSuffix(mode, "-hot")
			for k := range svcs {
				i := (k + rep) % len(svcs) // each repetition starts with another service
				s := svcs[i]
				r := s.measure(t, perCaller, hot, fmt.Sprintf("%s-%d", mode, rep))
				t.Logf("%s, rep %d: %s: %s", mode, rep+1, s.name, r)
				results[mode][i] = append(results[mode][i], r)
			}
		}
	}
	for _, mode := range modes {
		svcs := svcsOf(mode)
		meds := make([]loadResult, len(svcs))
		for i, s := range svcs {
			meds[i] = median(results[mode][i])
			t.Logf("%s, median of %d: %s: %s", mode, reps, s.name, meds[i])
		}
		for i, s := range svcs[1:] {
			o := meds[i+1]
			t.Logf("%s: ratewarden / %s: %.2fx req/s, p99 %.2fx, service CPU per request %.2fx, all CPU per request %.2fx",
				mode, s.name, meds[0].rate/o.rate, meds[0].p99.Seconds()/o.p99.Seconds(), meds[0].cpu.Seconds()/o.cpu.Seconds(), meds[0].total().Seconds()/o.total().Seconds())
		}
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// loadService is a running service under load: its process, its Redis
// (nil in memory) and a client per connection.
type loadService struct {
	name    string
	pid     int
	redis   *testredis.Server
	clients []rlspb.RateLimitServiceClient
}

// startLoad runs cmd until the test ends, once it answers, with
// loadConns connections to grpcAddr.
func startLoad(t *testing.T, name string, cmd *exec.Cmd, grpcAddr string, rs *testredis.Server) *loadService {
	t.Helper()
	file := strings.NewReplacer("/", "-", " ", "-", "(", "", ")", "").Replace(name)
	s := &loadService{name: name, redis: rs, clients: []rlspb.RateLimitServiceClient{startProc(t, file, cmd, grpcAddr).c}}
	s.pid = cmd.Process.Pid
	for len(s.clients) < loadConns {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		s.clients = append(s.clients, rlspb.NewRateLimitServiceClient(conn))
	}
	return s
}

// loadResult is one measured run.
type loadResult struct {
	rate          float64       // requests per second
	p50, p99      time.Duration // latency percentiles
	cpu, redisCPU time.Duration // per request: the service's process, its redis-server
	clientCPU     time.Duration // per request: this process, the callers
}

// total is the CPU time of a request on every process: the service's, its
// redis-server's and the caller's.
func (r loadResult) total() time.Duration { return r.cpu + r.redisCPU + r.clientCPU }

func (r loadResult) String() string {
	s := fmt.Sprintf("%.0f req/s, p50 %v, p99 %v, CPU per request: service %v, client %v",
		r.rate, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.cpu.Round(100*time.Nanosecond), r.clientCPU.Round(100*time.Nanosecond))
	if r.redisCPU > 0 {
		s += fmt.Sprintf(", redis-server %v", r.redisCPU.Round(100*time.Nanosecond))
	}
	return s
}

// median is the median of each figure of rs, apart.
func median(rs []loadResult) loadResult {
	pick := func(f func(loadResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	d := func(f func(loadResult) time.Duration) time.Duration {
		return time.Duration(pick(func(r loadResult) float64 { return float64(f(r)) }))
	}
	return loadResult{
		rate:      pick(func(r loadResult) float64 { return r.rate }),
		p50:       d(func(r loadResult) time.Duration { return r.p50 }),
		p99:       d(func(r loadResult) time.Duration { return r.p99 }),
		cpu:       d(func(r loadResult) time.Duration { return r.cpu }),
		redisCPU:  d(func(r loadResult) time.Duration { return r.redisCPU }),
		clientCPU: d(func(r loadResult) time.Duration { return r.clientCPU }),
	}
}

// measure warms s up, then sends loadCallers × perCaller requests, each
// caller on its own descriptor or all on one (hot), and measures. Every
// request must be answered OK.
func (s *loadService) measure(t *testing.T, perCaller int, hot bool, tag string) loadResult {
	t.Helper()
	if errs := s.run(loadWarm, hot, tag+"-warm", nil); errs != "" {
		t.Fatalf("%s: warm-up: %s", s.name, errs)
	}
	lat := make([][]time.Duration, loadCallers)
	for c := range lat {
		lat[c] = make([]time.Duration, 0, perCaller)
	}
	cpu0, rcpu0, ccpu0 := procCPU(t, s.pid), s.redisCPU(t), selfCPU()
	start := time.Now()
	errs := s.run(perCaller, hot, tag, lat)
	el := time.Since(start)
	cpu1, rcpu1, ccpu1 := procCPU(t, s.pid), s.redisCPU(t), selfCPU()
	if errs != "" {
		t.Errorf("%s: %s", s.name, errs)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	n := time.Duration(len(all))
	return loadResult{
		rate: float64(len(all)) / el.Seconds(),
		p50:  all[len(all)/2], p99: all[len(all)*99/100],
		cpu: (cpu1 - cpu0) / n, redisCPU: (rcpu1 - rcpu0) / n, clientCPU: (ccpu1 - ccpu0) / n,
	}
}

// run sends loadCallers × perCaller requests, recording each latency in
// lat[caller] when lat is not nil, and describes the failures ("" when
// none).
func (s *loadService) run(perCaller int, hot bool, tag string, lat [][]time.Duration) string {
	var mu sync.Mutex
	errs, first := 0, ""
	var wg sync.WaitGroup
	for c := range loadCallers {
		wg.Go(func() {
			user := tag + "-" + strconv.Itoa(c)
			if hot {
				user = tag + "-hot"
			}
			client := s.clients[c%len(s.clients)]
			req := &rlspb.RateLimitRequest{Domain: "load", Descriptors: []*rlcommon.RateLimitDescriptor{d("user", user)}}
			for range perCaller {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				resp, err := client.ShouldRateLimit(ctx, req)
				took := time.Since(start)
				cancel()
				if err == nil && resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
					err = fmt.Errorf("overall code %v", resp.GetOverallCode())
				}
				if err != nil {
					mu.Lock()
					if errs++; first == "" {
						first = err.Error()
					}
					mu.Unlock()
					continue
				}
				if lat != nil {
					lat[c] = append(lat[c], took)
				}
			}
		})
	}
	wg.Wait()
	if errs > 0 {
		return fmt.Sprintf("%d of %d requests failed, the first: %s", errs, loadCallers*perCaller, first)
	}
	return ""
}

// procCPU is the CPU time (user and system) process pid has used, from
// /proc/<pid>/stat.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("CPU time of process %d: %v", pid, err)
	}
	// The fields after the command (in parentheses, which may hold
	// spaces): state is field 3, utime 14, stime 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("CPU time of process %d: cannot read %q", pid, b)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times: 100 on Linux everywhere that matters.
const clockTicks = 100

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU time s's redis-server has used (INFO cpu), 0 in
// memory.
func (s *loadService) redisCPU(t *testing.T) time.Duration {
	t.Helper()
	if s.redis == nil {
		return 0
	}
	info, err := testredis.Do(s.redis.Addr, "INFO", "cpu")
	if err != nil {
		t.Fatalf("redis INFO cpu: %v", err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("redis INFO cpu: %q: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
