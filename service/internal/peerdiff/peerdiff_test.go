package peerdiff

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden/internal/testredis"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// configs are the files both services load: one domain each.
var configs = []string{filepath.Join("..", "..", "server", "testdata", "every_feature.yaml"), filepath.Join("testdata", "edge.yaml")}

// build builds envoyproxy/ratelimit at the version go.mod pins and
// ratewarden from this checkout, into dir.
func build(t *testing.T, dir string) (peer, ours string) {
	t.Helper()
	return buildPeer(t, dir), buildOurs(t, dir)
}

// buildPeer builds envoyproxy/ratelimit at the version go.mod pins into
// dir.
func buildPeer(t *testing.T, dir string) string {
	t.Helper()
	peer := filepath.Join(dir, "peer")
	if out, err := exec.Command("go", "build", "-o", peer, "github.com/envoyproxy/ratelimit/src/service_cmd").CombinedOutput(); err != nil {
		t.Fatalf("build envoyproxy/ratelimit: %v\n%s", err, out)
	}
	return peer
}

// buildOurs builds ratewarden from this checkout into dir.
func buildOurs(t *testing.T, dir string) string {
	t.Helper()
	ours := filepath.Join(dir, "ratewarden")
	c := exec.Command("go", "build", "-o", ours, "./cmd/ratewarden")
	c.Dir = filepath.Join("..", "..")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("build ratewarden: %v\n%s", err, out)
	}
	return ours
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func port(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

// service is one running rate limit service.
type service struct {
	name string
	c    rlspb.RateLimitServiceClient
}

// startProc runs cmd until the test ends and returns a client of its gRPC
// address once it answers. start starts cmd (nil: cmd.Start).
func startProc(t *testing.T, name string, cmd *exec.Cmd, grpcAddr string, start func(*exec.Cmd) error) service {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	})
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := rlspb.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "warmup", Descriptors: []*rlcommon.RateLimitDescriptor{d("a", "b")}})
		cancel()
		if err == nil {
			return service{name, c}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("%s did not answer within 30s: %v\n%s", name, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mode is one set of envoyproxy/ratelimit settings and ratewarden's
// equivalent.
type mode struct {
	name     string
	peerEnv  []string
	ourFlags []string
}

var modes = []mode{
	{"defaults without headers", nil, []string{"--rls-headers", "none"}},
	{"headers and metadata", []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_RESET_HEADER=X-Reset", "RESPONSE_DYNAMIC_METADATA=true"},
		[]string{"--rls-headers", "envoy", "--response-dynamic-metadata"}},
	{"quota mode", []string{"QUOTA_MODE=true", "RESPONSE_DYNAMIC_METADATA=true"}, []string{"--rls-headers", "none", "--quota-mode", "--response-dynamic-metadata"}},
	{"shadow mode", []string{"SHADOW_MODE=true"}, []string{"--rls-headers", "none", "--shadow-mode"}},
}

// deliberateAnswers pins, per mode, both services' answers (in pin's form)
// to the requests whose answers differ on purpose (docs/service.md,
// "Differences from envoyproxy/ratelimit"); an answer that differs in any
// other way fails. Rejected hits and the other descriptors of a rejected
// request consume nothing: after "5 of 4" was rejected, "then 4 of 4" is
// within the limit here and over it at the peer (in quota mode the peer
// reports the violation without a reset, in shadow mode with an OK
// overall); "mixed over" leaves tenant=mx its 4 here, 3 at the peer, so
// "after mixed" (4 more) fits here only. An override counts apart from the
// configured limit of the same entries: "cfg + override" leaves the
// override 9 of 10 here, where the peer's one counter had counted "cfg c"
// too. In quota mode nothing is rejected, so "mixed over" and "after
// mixed" consume alike and the answers agree.
var deliberateAnswers = map[string]map[string][2]string{
	"defaults without headers": {
		"then 4 of 4": {
			`OVER_LIMIT [OVER_LIMIT 4/MINUTE "" remaining 0] resets [t] headers [] (reset -) `,
			`OK [OK 4/MINUTE "" remaining 0] resets [t] headers [] (reset -) `},
		"mixed over": {
			`OVER_LIMIT [OK 4/MINUTE "" remaining 3 OVER_LIMIT 0/SECOND "" remaining 0 OK 1/MINUTE "" remaining 0] resets [t t t] headers [] (reset -) `,
			`OVER_LIMIT [OK 4/MINUTE "" remaining 4 OVER_LIMIT 0/SECOND "" remaining 0 OK 1/MINUTE "" remaining 0] resets [t t t] headers [] (reset -) `},
		"after mixed": {
			`OVER_LIMIT [OVER_LIMIT 4/MINUTE "" remaining 0] resets [t] headers [] (reset -) `,
			`OK [OK 4/MINUTE "" remaining 0] resets [t] headers [] (reset -) `},
		"cfg + override": {
			`OK [OK 5/HOUR "" remaining 4 OK 10/HOUR "" remaining 8] resets [t t] headers [] (reset -) `,
			`OK [OK 5/HOUR "" remaining 4 OK 10/HOUR "" remaining 9] resets [t t] headers [] (reset -) `},
	},
	"headers and metadata": {
		"then 4 of 4": {
			`OVER_LIMIT [OVER_LIMIT 4/MINUTE "" remaining 0] resets [t] headers [RateLimit-Limit: 4 RateLimit-Remaining: 0] (reset t) map[descriptors:[map[entries:[tenant=big]]] domain:shop hitsAddend:4 quotaModeEnabled:false]`,
			`OK [OK 4/MINUTE "" remaining 0] resets [t] headers [RateLimit-Limit: 4 RateLimit-Remaining: 0] (reset t) map[descriptors:[map[entries:[tenant=big]]] domain:shop hitsAddend:4 quotaModeEnabled:false]`},
		"mixed over": {
			`OVER_LIMIT [OK 4/MINUTE "" remaining 3 OVER_LIMIT 0/SECOND "" remaining 0 OK 1/MINUTE "" remaining 0] resets [t t t] headers [RateLimit-Limit: 0 RateLimit-Remaining: 0] (reset t) map[descriptors:[map[entries:[tenant=mx]] map[entries:[banned=mx]] map[entries:[trial=t]]] domain:shop hitsAddend:1 quotaModeEnabled:false]`,
			`OVER_LIMIT [OK 4/MINUTE "" remaining 4 OVER_LIMIT 0/SECOND "" remaining 0 OK 1/MINUTE "" remaining 0] resets [t t t] headers [RateLimit-Limit: 0 RateLimit-Remaining: 0] (reset t) map[descriptors:[map[entries:[tenant=mx]] map[entries:[banned=mx]] map[entries:[trial=t]]] domain:shop hitsAddend:1 quotaModeEnabled:false]`},
		"after mixed": {
			`OVER_LIMIT [OVER_LIMIT 4/MINUTE "" remaining 0] resets [t] headers [RateLimit-Limit: 4 RateLimit-Remaining: 0] (reset t) map[descriptors:[map[entries:[tenant=mx]]] domain:shop hitsAddend:4 quotaModeEnabled:false]`,
			`OK [OK 4/MINUTE "" remaining 0] resets [t] headers [RateLimit-Limit: 4 RateLimit-Remaining: 0] (reset t) map[descriptors:[map[entries:[tenant=mx]]] domain:shop hitsAddend:4 quotaModeEnabled:false]`},
		"cfg + override": {
			`OK [OK 5/HOUR "" remaining 4 OK 10/HOUR "" remaining 8] resets [t t] headers [RateLimit-Limit: 5 RateLimit-Remaining: 4] (reset t) map[descriptors:[map[entries:[cfg=c]] map[entries:[cfg=c]]] domain:edge2 hitsAddend:1 quotaModeEnabled:false]`,
			`OK [OK 5/HOUR "" remaining 4 OK 10/HOUR "" remaining 9] resets [t t] headers [RateLimit-Limit: 5 RateLimit-Remaining: 4] (reset t) map[descriptors:[map[entries:[cfg=c]] map[entries:[cfg=c]]] domain:edge2 hitsAddend:1 quotaModeEnabled:false]`},
	},
	"quota mode": {
		"then 4 of 4": {
			`OK [OK 4/MINUTE "" remaining 0] resets [-] headers [] (reset -) map[descriptors:[map[entries:[tenant=big]]] domain:shop hitsAddend:4 quotaModeEnabled:false quotaModeViolations:[0]]`,
			`OK [OK 4/MINUTE "" remaining 0] resets [t] headers [] (reset -) map[descriptors:[map[entries:[tenant=big]]] domain:shop hitsAddend:4 quotaModeEnabled:false]`},
		"mixed over": {
			`OK [OK 4/MINUTE "" remaining 3 OK 0/SECOND "" remaining 0 OK 1/MINUTE "" remaining 0] resets [t - t] headers [] (reset -) map[descriptors:[map[entries:[tenant=mx]] map[entries:[banned=mx]] map[entries:[trial=t]]] domain:shop hitsAddend:1 quotaModeEnabled:false quotaModeViolations:[1]]`,
			`OK [OK 4/MINUTE "" remaining 3 OK 0/SECOND "" remaining 0 OK 1/MINUTE "" remaining 0] resets [t - t] headers [] (reset -) map[descriptors:[map[entries:[tenant=mx]] map[entries:[banned=mx]] map[entries:[trial=t]]] domain:shop hitsAddend:1 quotaModeEnabled:false quotaModeViolations:[1]]`},
		"after mixed": {
			`OK [OK 4/MINUTE "" remaining 0] resets [-] headers [] (reset -) map[descriptors:[map[entries:[tenant=mx]]] domain:shop hitsAddend:4 quotaModeEnabled:false quotaModeViolations:[0]]`,
			`OK [OK 4/MINUTE "" remaining 0] resets [-] headers [] (reset -) map[descriptors:[map[entries:[tenant=mx]]] domain:shop hitsAddend:4 quotaModeEnabled:false quotaModeViolations:[0]]`},
		"cfg + override": {
			`OK [OK 5/HOUR "" remaining 4 OK 10/HOUR "" remaining 8] resets [t t] headers [] (reset -) map[descriptors:[map[entries:[cfg=c]] map[entries:[cfg=c]]] domain:edge2 hitsAddend:1 quotaModeEnabled:false]`,
			`OK [OK 5/HOUR "" remaining 4 OK 10/HOUR "" remaining 9] resets [t t] headers [] (reset -) map[descriptors:[map[entries:[cfg=c]] map[entries:[cfg=c]]] domain:edge2 hitsAddend:1 quotaModeEnabled:false]`},
	},
	"shadow mode": {
		"then 4 of 4": {
			`OK [OVER_LIMIT 4/MINUTE "" remaining 0] resets [t] headers [] (reset -) `,
			`OK [OK 4/MINUTE "" remaining 0] resets [t] headers [] (reset -) `},
		"mixed over": {
			`OK [OK 4/MINUTE "" remaining 3 OVER_LIMIT 0/SECOND "" remaining 0 OK 1/MINUTE "" remaining 0] resets [t t t] headers [] (reset -) `,
			`OK [OK 4/MINUTE "" remaining 4 OVER_LIMIT 0/SECOND "" remaining 0 OK 1/MINUTE "" remaining 0] resets [t t t] headers [] (reset -) `},
		"after mixed": {
			`OK [OVER_LIMIT 4/MINUTE "" remaining 0] resets [t] headers [] (reset -) `,
			`OK [OK 4/MINUTE "" remaining 0] resets [t] headers [] (reset -) `},
		"cfg + override": {
			`OK [OK 5/HOUR "" remaining 4 OK 10/HOUR "" remaining 8] resets [t t] headers [] (reset -) `,
			`OK [OK 5/HOUR "" remaining 4 OK 10/HOUR "" remaining 9] resets [t t] headers [] (reset -) `},
	},
}

// pin is an answer in the form deliberateAnswers pins: each reset is "t"
// (present) or "-", as its value moves with the clock (resetsNear
// compares the values of the two services).
func pin(a answer) string {
	mark := func(r int64) string {
		if r >= 0 {
			return "t"
		}
		return "-"
	}
	resets := make([]string, len(a.resets))
	for i, r := range a.resets {
		resets[i] = mark(r)
	}
	return fmt.Sprintf("%s %v resets %v headers %v (reset %s) %s", a.overall, a.statuses, resets, a.headers, mark(a.hreset), a.metadata)
}

// resetsNear reports whether the resets both answers give are a second
// apart at most.
func resetsNear(a, b answer) bool {
	if len(a.resets) != len(b.resets) || (a.hreset >= 0 && b.hreset >= 0 && !near(a.hreset, b.hreset)) {
		return false
	}
	for i := range a.resets {
		if a.resets[i] >= 0 && b.resets[i] >= 0 && !near(a.resets[i], b.resets[i]) {
			return false
		}
	}
	return true
}

// TestSideBySide replays the script on both services in every mode and
// compares each answer: codes, limits, remaining, duration_until_reset
// (to the second: the two answers are a few milliseconds apart), headers
// and dynamic metadata.
func TestSideBySide(t *testing.T) {
	bin := t.TempDir()
	peerBin, ourBin := build(t, bin)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			peerRedis, ourRedis := testredis.Start(t), testredis.Start(t)
			rt := t.TempDir()
			cfgDir := filepath.Join(rt, "ratelimit", "config")
			if err := os.MkdirAll(cfgDir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, f := range configs {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(cfgDir, filepath.Base(f)), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			pg, ph, pd := freeAddr(t), freeAddr(t), freeAddr(t)
			pc := exec.Command(peerBin)
			pc.Env = append([]string{"PATH=" + os.Getenv("PATH"), "USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp",
				"REDIS_URL=" + peerRedis.Addr, "RUNTIME_ROOT=" + rt, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
				"RUNTIME_WATCH_ROOT=false", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
				"GRPC_PORT=" + port(pg), "PORT=" + port(ph), "DEBUG_PORT=" + port(pd)}, m.peerEnv...)
			og := freeAddr(t)
			oc := exec.Command(ourBin, append([]string{"serve", "--config", cfgDir, "--redis", "redis://" + ourRedis.Addr,
				"--http-addr", freeAddr(t), "--grpc-addr", og, "--log-level", "warn", "--redis-timeout", "5s"}, m.ourFlags...)...)
			oc.Env = append([]string{"PATH=" + os.Getenv("PATH")}, m.peerEnv...) // LIMIT_*_HEADER names too
			peer := startProc(t, "envoyproxy-ratelimit", pc, pg, nil)
			ours := startProc(t, "ratewarden", oc, og, nil)
			// Both services count fixed windows from the epoch: start early in
			// a minute so the script's minute limits stay in one window.
			if s := time.Now().Second(); s > 40 {
				time.Sleep(time.Duration(61-s) * time.Second)
			}
			pinned := deliberateAnswers[m.name]
			diffs, onPurpose, seen := 0, 0, 0
			for _, r := range script() {
				a, b := ask(t, peer, r), ask(t, ours, r)
				want, listed := pinned[r.name]
				switch {
				case listed:
					seen++
					if got := [2]string{pin(a), pin(b)}; got != want || !resetsNear(a, b) {
						t.Errorf("%s, a deliberate difference, answered otherwise than pinned:\n  envoyproxy/ratelimit: %s\n  want                  %s\n  ratewarden:           %s\n  want                  %s",
							r.name, a, want[0], b, want[1])
					}
					if !equal(a, b) {
						onPurpose++
					}
				case !equal(a, b):
					diffs++
					t.Errorf("%s:\n  envoyproxy/ratelimit: %s\n  ratewarden:           %s", r.name, a, b)
				}
			}
			if seen != len(pinned) || len(pinned) == 0 {
				t.Errorf("%d of the %d pinned requests of mode %q are in the script", seen, len(pinned), m.name)
			}
			t.Logf("%d requests: %d answers differ on purpose, as pinned (%d pinned), %d otherwise", len(script()), onPurpose, len(pinned), diffs)
		})
	}
}

// answer is one ShouldRateLimit answer in comparable parts.
type answer struct {
	overall  string
	statuses []string
	resets   []int64 // duration_until_reset seconds of each status, -1 without
	headers  []string
	hreset   int64 // the Reset header's value, -1 without
	metadata string
}

func (a answer) String() string {
	return fmt.Sprintf("%s %v resets %v headers %v (reset %d) %s", a.overall, a.statuses, a.resets, a.headers, a.hreset, a.metadata)
}

func near(x, y int64) bool { return x == y || (x >= 0 && y >= 0 && (x-y == 1 || y-x == 1)) }

func equal(a, b answer) bool {
	if a.overall != b.overall || !slices.Equal(a.statuses, b.statuses) || !slices.Equal(a.headers, b.headers) ||
		a.metadata != b.metadata || !near(a.hreset, b.hreset) || len(a.resets) != len(b.resets) {
		return false
	}
	for i := range a.resets {
		if !near(a.resets[i], b.resets[i]) {
			return false
		}
	}
	return true
}

func ask(t *testing.T, s service, r req) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: r.domain, Descriptors: r.ds, HitsAddend: r.hits})
	if err != nil {
		return answer{overall: "error: " + err.Error()}
	}
	a := answer{overall: resp.GetOverallCode().String(), hreset: -1}
	for _, st := range resp.GetStatuses() {
		s := st.GetCode().String()
		if cl := st.GetCurrentLimit(); cl != nil {
			s += fmt.Sprintf(" %d/%v %q", cl.GetRequestsPerUnit(), cl.GetUnit(), cl.GetName())
		}
		a.statuses = append(a.statuses, s+" remaining "+strconv.FormatUint(uint64(st.GetLimitRemaining()), 10))
		reset := int64(-1)
		if d := st.GetDurationUntilReset(); d != nil {
			reset = d.GetSeconds()
		}
		a.resets = append(a.resets, reset)
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == "X-Reset" {
			a.hreset, _ = strconv.ParseInt(h.GetValue(), 10, 64)
			continue
		}
		a.headers = append(a.headers, h.GetKey()+": "+h.GetValue())
	}
	if md := resp.GetDynamicMetadata(); md != nil {
		m := md.AsMap()
		for _, d := range m["descriptors"].([]any) { // the override's text form is not stable: leave it out
			delete(d.(map[string]any), "limit")
		}
		a.metadata = fmt.Sprint(m)
	}
	return a
}

type req struct {
	name, domain string
	hits         uint32
	ds           []*rlcommon.RateLimitDescriptor
}

func d(kv ...string) *rlcommon.RateLimitDescriptor {
	x := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		x.Entries = append(x.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return x
}

func ds(x ...*rlcommon.RateLimitDescriptor) []*rlcommon.RateLimitDescriptor { return x }

func override(rpu uint32, unit typepb.RateLimitUnit, kv ...string) *rlcommon.RateLimitDescriptor {
	x := d(kv...)
	x.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return x
}

func hits(n uint64, kv ...string) *rlcommon.RateLimitDescriptor {
	x := d(kv...)
	x.HitsAddend = wrapperspb.UInt64(n)
	return x
}

// script is the requests, in order: every feature of the two configs.
func script() []req {
	week := override(1, typepb.RateLimitUnit(rlspb.RateLimitResponse_RateLimit_WEEK), "sku", "weekly")
	shop := []req{
		{"nested tenant", "", 1, ds(d("tenant", "a"))},
		{"nested route", "", 1, ds(d("tenant", "a", "route", "x"))},
		{"nested checkout", "", 1, ds(d("tenant", "a", "route", "checkout"))},
		{"deeper than the config", "", 1, ds(d("tenant", "a", "route", "x", "extra", "1"))},
		{"wildcards in config order", "", 1, ds(d("sku", "book-rare-1"))},
		{"b*k literal", "", 1, ds(d("sku", "b*k"))},
		{"bak", "", 1, ds(d("sku", "bak"))},
		{"x*y*z literal", "", 1, ds(d("sku", "x*y*z"))},
		{"xAyBz", "", 1, ds(d("sku", "xAyBz"))},
		{"x*y* prefix", "", 1, ds(d("sku", "x*yQ"))},
		{"share docs/a x2", "", 2, ds(d("file", "docs/a"))},
		{"share docs/b", "", 1, ds(d("file", "docs/b"))},
		{"share docs/c", "", 1, ds(d("file", "docs/c"))},
		{"media/a x3", "", 3, ds(d("file", "media/a"))},
		{"media/b", "", 1, ds(d("file", "media/b"))},
		{"unlimited", "", 1000, ds(d("staff", "s"))},
		{"shadow 1", "", 1, ds(d("trial", "t"))},
		{"shadow 2", "", 1, ds(d("trial", "t"))},
		{"quota 1", "", 1, ds(d("export", "e"))},
		{"quota 2", "", 1, ds(d("export", "e"))},
		{"shadow and quota 1", "", 1, ds(d("both", "b"))},
		{"shadow and quota 2", "", 1, ds(d("both", "b"))},
		{"replaces", "", 1, ds(d("user", "u"), d("plan", "gold"))},
		{"replaced unlimited", "", 1, ds(d("vip", "v"), d("promo", "p"))},
		{"user alone", "", 1, ds(d("user", "u"))},
		{"banned", "", 1, ds(d("banned", "b"))},
		{"5 of 4", "", 5, ds(d("tenant", "big"))},
		{"then 4 of 4", "", 4, ds(d("tenant", "big"))},
		{"unit s", "", 1, ds(d("unit", "s"))},
		{"unit m", "", 1, ds(d("unit", "m"))},
		{"unit h", "", 1, ds(d("unit", "h"))},
		{"unit d", "", 1, ds(d("unit", "d"))},
		{"unit w", "", 1, ds(d("unit", "w"))},
		{"unit mo", "", 1, ds(d("unit", "mo"))},
		{"unit y", "", 1, ds(d("unit", "y"))},
		{"override week", "", 1, ds(week)},
		{"override week 2", "", 1, ds(week)},
		{"override hour", "", 1, ds(override(2, typepb.RateLimitUnit_HOUR, "tenant", "ov"))},
		{"hits 0 looks", "", 1, ds(hits(0, "tenant", "look"))},
		{"per-descriptor hits", "", 1, ds(hits(3, "tenant", "per"), d("tenant", "per2"))},
		{"twice in one request", "", 1, ds(d("tenant", "twice"), d("tenant", "twice"))},
		{"mixed over", "", 1, ds(d("tenant", "mx"), d("banned", "mx"), d("trial", "t"))},
		{"after mixed", "", 4, ds(d("tenant", "mx"))},
		{"unknown domain", "nope", 1, ds(d("a", "b"))},
	}
	edge := []req{
		{"nested share o-1 i-1", "", 1, ds(d("outer", "o-1", "inner", "i-1"))},
		{"nested share o-2 i-2", "", 1, ds(d("outer", "o-2", "inner", "i-2"))},
		{"nested share o-3 i-3", "", 1, ds(d("outer", "o-3", "inner", "i-3"))},
		{"outer shared, inner not: o-1 j-1", "", 1, ds(d("outer", "o-1", "inner", "j-1"))},
		{"outer shared, inner not: o-2 j-1", "", 1, ds(d("outer", "o-2", "inner", "j-1"))},
		{"outer shared, inner not: o-3 j-1", "", 1, ds(d("outer", "o-3", "inner", "j-1"))},
		{"* matches any value", "", 1, ds(d("any", "whatever"))},
		{"* matches the empty value", "", 1, ds(d("any", ""))},
		{"key only, empty value", "", 1, ds(d("emp", ""))},
		{"exact value", "", 1, ds(d("emp", "x"))},
		{"override 0", "", 1, ds(override(0, typepb.RateLimitUnit_MINUTE, "cfg", "z"))},
		{"override without a node", "", 1, ds(override(1, typepb.RateLimitUnit_MINUTE, "nomatch", "z"))},
		{"override without a node 2", "", 1, ds(override(1, typepb.RateLimitUnit_MINUTE, "nomatch", "z"))},
		{"cfg + override", "", 1, ds(d("cfg", "c"), override(10, typepb.RateLimitUnit_HOUR, "cfg", "c"))},
		{"same twice", "", 2, ds(d("cfg", "t"), d("cfg", "t"))},
		{"request hits 0", "", 0, ds(d("cfg", "h0"))},
	}
	for i := range shop {
		if shop[i].domain == "" {
			shop[i].domain = "shop"
		}
	}
	for i := range edge {
		edge[i].domain = "edge2"
	}
	return append(shop, edge...)
}
