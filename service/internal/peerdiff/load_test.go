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

	"golang.org/x/sys/unix"

	"github.com/ratewarden/ratewarden/internal/testredis"
)

// loadConfig has one limit per caller key, high enough never to deny, so
// every service does the same work on every request, and a small one for
// the over-limit mode's tenant, which the warm-up uses up.
const loadConfig = "domain: load\ndescriptors:\n" +
	"  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n" +
	"  - key: tenant\n    rate_limit: {unit: day, requests_per_unit: 100}\n"

// The load: callers sending requests at once over conns connections per
// service, each caller perCaller requests after warm requests that are
// not measured.
const (
	loadCallers = 64 // PEERDIFF_LOAD_CALLERS changes it
	loadConns   = 4
	loadWarm    = 50
)

// loadModes are the modes TestLoadRatio knows, in its default order: the
// backend, then what the callers ask for.
var loadModes = []string{"redis-keys", "redis-hot", "redis-hot-over", "memory-keys", "memory-hot"}

// TestLoadRatio (set PEERDIFF_LOAD=1) puts the services under the same
// gRPC load, one after the other, and logs for each its rate, latency
// percentiles and CPU time per request (its own process's, its
// redis-server's and the callers'), with the medians of the repetitions
// and their ratios:
//
//   - Redis-backed: envoyproxy/ratelimit, ratewarden serve --redis, and
//     barerls -redis (the library's Redis stack behind a bare handler),
//     each on a redis-server of its own;
//   - in memory: ratewarden serve without Redis, and barerls (memstore
//     behind the same bare handler).
//
// 64 callers (PEERDIFF_LOAD_CALLERS) on 4 connections per service, through
// this package's light gRPC client (h2Conn), which costs the load a
// fraction of the CPU grpc-go's client does, so that the services and
// not their callers set the pace; PEERDIFF_LOAD_CLIENT=grpc uses
// grpc-go's generated client instead, as the load did before ("light",
// the default, names the light one). A mode runs
// with a descriptor per caller ("keys"), every caller on one hot
// descriptor under its limit ("hot"), or on one hot descriptor the
// warm-up took over its limit ("hot-over", Redis only: every measured
// answer is OVER_LIMIT). The repetitions interleave the services, each
// starting with the next one.
//
// On a machine with two CPUs or more the services run pinned to one CPU
// (PEERDIFF_LOAD_SVC_CPUS sets how many), GOMAXPROCS set to match, and
// the callers and the redis-servers to the others, so a service shares
// its CPU with nothing of the harness (PEERDIFF_LOAD_REDIS_ON=service
// puts the redis-servers beside the services); PEERDIFF_LOAD_PIN=0 runs
// all unpinned, as before. PEERDIFF_LOAD_REPS (default 3) sets the
// repetitions, PEERDIFF_LOAD_N (default 1000) the requests per caller,
// PEERDIFF_LOAD_MODES (default all of loadModes) which modes run, and
// PEERDIFF_LOAD_BASELINE, the path of another ratewarden binary (an
// earlier commit's, say), adds it to every mode; PEERDIFF_LOAD_OURS, a
// ratewarden binary, is measured in place of one built from this
// checkout. PEERDIFF_LOAD_PEER_CACHE, a size in bytes, adds
// envoyproxy/ratelimit with its local cache of over-limit keys
// (LOCAL_CACHE_SIZE_IN_BYTES, off by default) to the Redis-backed
// modes; PEERDIFF_LOAD_LEASES, a number of units, adds ratewarden with
// --lease-size of that many, and PEERDIFF_LOAD_BARE_LEASES barerls in
// lease mode (leases of that size). PEERDIFF_LOAD_PERF, a directory, gets perf(1) profiles of
// the first repetition (which the recording slows) of every service, its
// redis-server and the callers, beside the binaries. ratewarden runs with
// --rls-headers none, as envoyproxy/ratelimit answers by default. It
// asserts nothing about speed, only that every request was answered as
// the mode expects and that the pinning held: the numbers are for
// docs/performance.md.
func TestLoadRatio(t *testing.T) {
	if os.Getenv("PEERDIFF_LOAD") == "" {
		t.Skip("set PEERDIFF_LOAD=1 to measure")
	}
	reps, perCaller := envInt(t, "PEERDIFF_LOAD_REPS", 3), envInt(t, "PEERDIFF_LOAD_N", 1000)
	modes := strings.Split(os.Getenv("PEERDIFF_LOAD_MODES"), ",")
	if modes[0] == "" {
		modes = loadModes
	}
	for _, m := range modes {
		if !slices.Contains(loadModes, m) || m == "memory-hot-over" {
			t.Fatalf("PEERDIFF_LOAD_MODES: unknown mode %q, want some of %v", m, loadModes)
		}
	}
	pin := planPinning(t)
	t.Log(pin)
	client := loadClientOf(t)
	t.Logf("callers: %s", loadClients[client])
	defer pin.pinSelf(t)() // before any redis-server starts: they inherit it
	rig := newLoadRig(t, pin, modes, client)
	results := map[string][][]loadResult{} // mode -> service -> repetitions
	for rep := range reps {
		for _, mode := range modes {
			svcs := rig.svcsOf(mode)
			if results[mode] == nil {
				results[mode] = make([][]loadResult, len(svcs))
			}
			for k := range svcs {
				i := (k + rep) % len(svcs) // each repetition starts with another service
				s := svcs[i]
				var prof *perfRecord
				if rep == 0 {
					prof = startPerf(t, mode, s)
				}
				r := s.measure(t, perCaller, mode, fmt.Sprintf("%s-%d", mode, rep), prof)
				t.Logf("%s, rep %d: %s: %s", mode, rep+1, s.name, r)
				results[mode][i] = append(results[mode][i], r)
			}
		}
	}
	rig.checkPinned(t)
	for _, mode := range modes {
		svcs := rig.svcsOf(mode)
		meds := make([]loadResult, len(svcs))
		for i, s := range svcs {
			meds[i] = median(results[mode][i])
			t.Logf("%s, median of %d: %s: %s", mode, reps, s.name, meds[i])
		}
		for i, s := range svcs[1:] {
			o := meds[i+1]
			t.Logf("%s: ratewarden / %s (%s callers): %.2fx req/s, p99 %.2fx, service CPU per request %.2fx, all CPU per request %.2fx",
				mode, s.name, client, meds[0].rate/o.rate, meds[0].p99.Seconds()/o.p99.Seconds(), meds[0].cpu.Seconds()/o.cpu.Seconds(), meds[0].total().Seconds()/o.total().Seconds())
			t.Logf("%s: ratewarden / %s, within each repetition: req/s %s, p99 %s", mode, s.name,
				pairedRatios(results[mode][0], results[mode][i+1], func(r loadResult) float64 { return r.rate }),
				pairedRatios(results[mode][0], results[mode][i+1], func(r loadResult) float64 { return r.p99.Seconds() }))
		}
	}
}

// loadClients are the clients the load may use (PEERDIFF_LOAD_CLIENT),
// and what each is.
var loadClients = map[string]string{
	"light": "the light gRPC client (h2Conn: one write for many requests, answers read by one goroutine)",
	"grpc":  "grpc-go's generated client (rlspb.RateLimitServiceClient)",
}

// loadClientOf reads PEERDIFF_LOAD_CLIENT: "light" (the default) or "grpc".
func loadClientOf(t *testing.T) string {
	t.Helper()
	v := os.Getenv("PEERDIFF_LOAD_CLIENT")
	if v == "" {
		return "light"
	}
	if _, ok := loadClients[v]; !ok {
		t.Fatalf("PEERDIFF_LOAD_CLIENT=%q: want light or grpc", v)
	}
	return v
}

// pairedRatios describes f(a[i])/f(b[i]) over the repetitions i: the
// median, then the lowest and highest. A repetition's runs are seconds
// apart, so its ratio sees the machine's other load alike on both.
func pairedRatios(a, b []loadResult, f func(loadResult) float64) string {
	rs := make([]float64, len(a))
	for i := range a {
		rs[i] = f(a[i]) / f(b[i])
	}
	slices.Sort(rs)
	return fmt.Sprintf("median %.2fx (%.2f to %.2f)", rs[len(rs)/2], rs[0], rs[len(rs)-1])
}

// loadRig is TestLoadRatio's running services: the Redis-backed ones and
// the in-memory ones, ratewarden first in each, then what it is compared
// with.
type loadRig struct {
	pin               pinning
	callers           int
	client            string // a key of loadClients
	redisSvcs, memSvc []*loadService
}

// newLoadRig builds the binaries, writes the config and starts the
// services the modes need.
func newLoadRig(t *testing.T, pin pinning, modes []string, client string) *loadRig {
	t.Helper()
	dir := t.TempDir()
	if d := os.Getenv("PEERDIFF_LOAD_PERF"); d != "" {
		dir = d // the profiles need the binaries' symbols
	}
	peerBin, ourBin := buildPeer(t, dir), os.Getenv("PEERDIFF_LOAD_OURS")
	if ourBin == "" {
		ourBin = buildOurs(t, dir)
	}
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
	// serve runs ratewarden (bin) on cfgDir, on redisURL ("": in memory),
	// with extra flags.
	serve := func(bin, redisURL string, extra ...string) (*exec.Cmd, string) {
		addr := freeAddr(t)
		args := []string{"serve", "--config", cfgDir, "--http-addr", freeAddr(t), "--grpc-addr", addr, "--log-level", "warn", "--rls-headers", "none"}
		if redisURL != "" {
			args = append(args, "--redis", redisURL)
		}
		args = append(args, extra...)
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		return cmd, addr
	}
	rig := &loadRig{pin: pin, callers: envInt(t, "PEERDIFF_LOAD_CALLERS", loadCallers), client: client}
	if need("redis") {
		peerRedis, ourRedis, bareRedis := rig.redis(t), rig.redis(t), rig.redis(t)
		// peer runs envoyproxy/ratelimit on rs with extra settings.
		peer := func(rs *testredis.Server, extra ...string) (*exec.Cmd, string) {
			pg, ph, pd := freeAddr(t), freeAddr(t), freeAddr(t)
			pc := exec.Command(peerBin)
			pc.Env = append([]string{"PATH=" + os.Getenv("PATH"), "USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp",
				"REDIS_URL=" + rs.Addr, "RUNTIME_ROOT=" + rt, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
				"RUNTIME_WATCH_ROOT=false", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
				"GRPC_PORT=" + port(pg), "PORT=" + port(ph), "DEBUG_PORT=" + port(pd)}, extra...)
			return pc, pg
		}
		pc, pg := peer(peerRedis)
		oc, og := serve(ourBin, "redis://"+ourRedis.Addr)
		bg := freeAddr(t)
		bc := exec.Command(bareBin, "-addr", bg, "-redis", "redis://"+bareRedis.Addr, "-over", "tenant")
		rig.redisSvcs = []*loadService{
			rig.start(t, "ratewarden", oc, og, ourRedis),
			rig.start(t, "envoyproxy/ratelimit", pc, pg, peerRedis),
			rig.start(t, "library (bare)", bc, bg, bareRedis),
		}
		if n := os.Getenv("PEERDIFF_LOAD_LEASES"); n != "" {
			rs := rig.redis(t)
			c, a := serve(ourBin, "redis://"+rs.Addr, "--lease-size", n)
			rig.redisSvcs = append(rig.redisSvcs, rig.start(t, "ratewarden (leases of "+n+")", c, a, rs))
		}
		if n := os.Getenv("PEERDIFF_LOAD_BARE_LEASES"); n != "" {
			rs, a := rig.redis(t), freeAddr(t)
			c := exec.Command(bareBin, "-addr", a, "-redis", "redis://"+rs.Addr, "-over", "tenant", "-leases", n)
			rig.redisSvcs = append(rig.redisSvcs, rig.start(t, "library (bare, leases of "+n+")", c, a, rs))
		}
		if size := os.Getenv("PEERDIFF_LOAD_PEER_CACHE"); size != "" {
			rs := rig.redis(t)
			c, a := peer(rs, "LOCAL_CACHE_SIZE_IN_BYTES="+size)
			rig.redisSvcs = append(rig.redisSvcs, rig.start(t, "envoyproxy/ratelimit (local cache)", c, a, rs))
		}
		if baseline != "" {
			baseRedis := rig.redis(t)
			c, a := serve(baseline, "redis://"+baseRedis.Addr)
			rig.redisSvcs = append(rig.redisSvcs, rig.start(t, "ratewarden (baseline)", c, a, baseRedis))
		}
	}
	if need("memory") {
		oc, og := serve(ourBin, "")
		bg := freeAddr(t)
		rig.memSvc = []*loadService{
			rig.start(t, "ratewarden", oc, og, nil),
			rig.start(t, "library (bare)", exec.Command(bareBin, "-addr", bg), bg, nil),
		}
		if baseline != "" {
			c, a := serve(baseline, "")
			rig.memSvc = append(rig.memSvc, rig.start(t, "ratewarden (baseline)", c, a, nil))
		}
	}
	rig.checkPinned(t)
	return rig
}

func (r *loadRig) svcsOf(mode string) []*loadService {
	if strings.HasPrefix(mode, "memory-") {
		return r.memSvc
	}
	return r.redisSvcs
}

// redis starts a redis-server where the pinning puts them.
func (r *loadRig) redis(t *testing.T) *testredis.Server {
	t.Helper()
	rs := testredis.Start(t)
	if r.pin.on {
		if err := pinTasks(redisPid(t, rs), r.pin.redis); err != nil {
			t.Fatalf("pinning redis-server %s: %v", rs.Addr, err)
		}
	}
	return rs
}

// start starts a service on the services' CPUs and opens the load's
// connections to it.
func (r *loadRig) start(t *testing.T, name string, cmd *exec.Cmd, grpcAddr string, rs *testredis.Server) *loadService {
	t.Helper()
	file := strings.NewReplacer("/", "-", " ", "-", "(", "", ")", "").Replace(name)
	first := startProc(t, file, cmd, grpcAddr, r.pin.start).c
	s := &loadService{name: name, redis: rs, callers: r.callers, pid: cmd.Process.Pid}
	if r.client == "grpc" {
		s.conns = append(s.conns, grpcConn{first})
	}
	for len(s.conns) < loadConns {
		if r.client == "light" {
			c, err := dialH2(grpcAddr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.close)
			s.conns = append(s.conns, c)
			continue
		}
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		s.conns = append(s.conns, grpcConn{rlspb.NewRateLimitServiceClient(conn)})
	}
	return s
}

// loadConn is a connection of the load to a service, through one of
// loadClients.
type loadConn interface {
	// caller prepares req to be sent again and again until ctx ends and
	// returns what sends it once: the answer's overall code, or the error.
	caller(ctx context.Context, req *rlspb.RateLimitRequest) (func() (rlspb.RateLimitResponse_Code, error), error)
}

// grpcConn is a loadConn through grpc-go's generated client.
type grpcConn struct{ c rlspb.RateLimitServiceClient }

func (g grpcConn) caller(ctx context.Context, req *rlspb.RateLimitRequest) (func() (rlspb.RateLimitResponse_Code, error), error) {
	return func() (rlspb.RateLimitResponse_Code, error) {
		resp, err := g.c.ShouldRateLimit(ctx, req)
		return resp.GetOverallCode(), err
	}, nil
}

func (c *h2Conn) caller(ctx context.Context, req *rlspb.RateLimitRequest) (func() (rlspb.RateLimitResponse_Code, error), error) {
	k, err := c.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	return func() (rlspb.RateLimitResponse_Code, error) { return k.call(ctx) }, nil
}

// checkPinned fails unless every thread of every service, of every
// redis-server and of this process runs where the pinning put it, and
// logs what it checked.
func (r *loadRig) checkPinned(t *testing.T) {
	t.Helper()
	if !r.pin.on {
		return
	}
	check := func(what string, pid int, want unix.CPUSet) {
		n, err := checkPinned(pid, want)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		t.Logf("%s (pid %d): %d threads, all on CPU %s", what, pid, n, listString(want))
	}
	check("callers", os.Getpid(), r.pin.load)
	for _, s := range slices.Concat(r.redisSvcs, r.memSvc) {
		check(s.name, s.pid, r.pin.svc)
		if s.redis != nil {
			check(s.name+"'s redis-server", redisPid(t, s.redis), r.pin.redis)
		}
	}
}

// redisPid is the process id of redis-server rs (INFO server).
func redisPid(t *testing.T, rs *testredis.Server) int {
	t.Helper()
	pid, err := rs.InfoInt("server", "process_id")
	if err != nil {
		t.Fatalf("redis-server's pid: %v", err)
	}
	return int(pid)
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
// (nil in memory) and the load's connections to it.
type loadService struct {
	name    string
	pid     int
	redis   *testredis.Server
	conns   []loadConn
	callers int // sending at once
}

// loadResult is one measured run.
type loadResult struct {
	rate          float64       // requests per second
	p50, p99      time.Duration // latency percentiles
	cpu, redisCPU time.Duration // per request: the service's process, its redis-server
	clientCPU     time.Duration // per request: this process, the callers
	busy          float64       // the service's CPU time over the run's time
}

// total is the CPU time of a request on every process: the service's, its
// redis-server's and the caller's.
func (r loadResult) total() time.Duration { return r.cpu + r.redisCPU + r.clientCPU }

func (r loadResult) String() string {
	s := fmt.Sprintf("%.0f req/s, p50 %v, p99 %v, service busy %.2f CPUs, CPU per request: service %v, client %v",
		r.rate, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.busy, r.cpu.Round(100*time.Nanosecond), r.clientCPU.Round(100*time.Nanosecond))
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
		busy:      pick(func(r loadResult) float64 { return r.busy }),
	}
}

// measure warms s up, then sends s.callers × perCaller requests of
// mode (loadRequest) and measures. Every answer must be the mode's.
// prof, when not nil, records the measured requests.
func (s *loadService) measure(t *testing.T, perCaller int, mode, tag string, prof *perfRecord) loadResult {
	t.Helper()
	if errs := s.run(loadWarm, mode, tag, true, nil); errs != "" {
		t.Fatalf("%s: warm-up: %s", s.name, errs)
	}
	lat := make([][]time.Duration, s.callers)
	for c := range lat {
		lat[c] = make([]time.Duration, 0, perCaller)
	}
	prof.begin(t)
	cpu0, rcpu0, ccpu0 := procCPU(t, s.pid), s.redisCPU(t), selfCPU()
	start := time.Now()
	errs := s.run(perCaller, mode, tag, false, lat)
	el := time.Since(start)
	cpu1, rcpu1, ccpu1 := procCPU(t, s.pid), s.redisCPU(t), selfCPU()
	prof.end(t)
	if errs != "" {
		t.Errorf("%s: %s", s.name, errs)
	}
	all := slices.Concat(lat...)
	if len(all) == 0 {
		t.Fatalf("%s: no request answered", s.name)
	}
	slices.Sort(all)
	n := time.Duration(len(all))
	return loadResult{
		rate: float64(len(all)) / el.Seconds(),
		p50:  all[len(all)/2], p99: all[len(all)*99/100],
		cpu: (cpu1 - cpu0) / n, redisCPU: (rcpu1 - rcpu0) / n, clientCPU: (ccpu1 - ccpu0) / n,
		busy: (cpu1 - cpu0).Seconds() / el.Seconds(),
	}
}

// loadRequest is caller c's request in mode, on descriptors of its own
// for tag: a user per caller ("keys"), one user for all ("hot", under
// its limit), or one tenant for all ("hot-over", 100 a day).
func loadRequest(mode, tag string, c int) *rlspb.RateLimitRequest {
	var desc *rlcommon.RateLimitDescriptor
	switch {
	case strings.HasSuffix(mode, "-hot-over"):
		desc = d("tenant", tag)
	case strings.HasSuffix(mode, "-hot"):
		desc = d("user", tag+"-hot")
	default:
		desc = d("user", tag+"-"+strconv.Itoa(c))
	}
	return &rlspb.RateLimitRequest{Domain: "load", Descriptors: []*rlcommon.RateLimitDescriptor{desc}}
}

// loadRunLimit bounds a run of requests in time.
const loadRunLimit = 10 * time.Minute

// run sends s.callers × perCaller requests of mode (loadRequest),
// recording each latency in lat[caller] when lat is not nil, and
// describes the failures ("" when none): errors and answers other than
// OK, or in the hot-over mode OVER_LIMIT (the warm-up may get either).
func (s *loadService) run(perCaller int, mode, tag string, warm bool, lat [][]time.Duration) string {
	want := []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK}
	if strings.HasSuffix(mode, "-hot-over") {
		want[0] = rlspb.RateLimitResponse_OVER_LIMIT
		if warm {
			want = append(want, rlspb.RateLimitResponse_OK)
		}
	}
	// One deadline for the run: a timer per request would cost the
	// callers' CPU, which the measured services share the machine with.
	ctx, cancel := context.WithTimeout(context.Background(), loadRunLimit)
	defer cancel()
	var mu sync.Mutex
	errs, first := 0, ""
	failed := func(n int, err error) {
		mu.Lock()
		if errs += n; first == "" {
			first = err.Error()
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := range s.callers {
		wg.Go(func() {
			call, err := s.conns[c%len(s.conns)].caller(ctx, loadRequest(mode, tag, c))
			if err != nil {
				failed(perCaller, err)
				return
			}
			for range perCaller {
				start := time.Now()
				code, err := call()
				took := time.Since(start)
				if err == nil && !slices.Contains(want, code) {
					err = fmt.Errorf("overall code %v, want %v", code, want)
				}
				if err != nil {
					failed(1, err)
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
		return fmt.Sprintf("%d of %d requests failed, the first: %s", errs, s.callers*perCaller, first)
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
	cpu, err := s.redis.CPU()
	if err != nil {
		t.Fatalf("redis-server's CPU time: %v", err)
	}
	return cpu
}
