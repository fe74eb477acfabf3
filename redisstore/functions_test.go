package redisstore

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/redis/rueidis"
)

// Every script of the package has its function library (library), and a
// script of another shape (no known own part) has none.
func TestLibraryShapes(t *testing.T) {
	for name, body := range map[string]string{"check": checkBody, "lease": leaseBody, "charge": chargeBody, "permit": permitBody} {
		for clock, text := range map[string]string{"production": clockLua, "test": testClockLua} {
			code, fn, ok := library(text + body)
			if !ok || !strings.HasPrefix(fn, "ratewarden_") || !strings.HasPrefix(code, "#!lua name="+fn+"\n") || !strings.Contains(code, "'"+fn+"'") {
				t.Errorf("%s script, %s clock: library %q, %v; want one named ratewarden_<hash>", name, clock, fn, ok)
			}
		}
	}
	a, _, _ := library(clockLua + checkBody)
	b, _, _ := library(testClockLua + checkBody)
	if a == b {
		t.Error("two clocks, one library")
	}
	if _, _, ok := library("return 1"); ok {
		t.Error("a script of no known shape got a library")
	}
}

// functionStore opens a Store on addr that runs its script as a function.
func functionStore(t *testing.T, addr string, opts ...Option) (*Store, *rueidisEval) {
	t.Helper()
	s := openStore(t, addr, append([]Option{WithFunctions(true)}, opts...)...)
	return s, s.ev.(*rueidisEval)
}

// With WithFunctions, checks run as FCALL once the Store has loaded its
// library, and keep going through a FUNCTION FLUSH (the library comes
// back) and a restart without persistence.
func TestFunctionsRun(t *testing.T) {
	srv := testredis.Start(t)
	s, ev := functionStore(t, srv.Addr)
	if ev.fn == "" {
		t.Fatal("no function on a standalone client")
	}
	lim := ratewarden.PerHour(5)
	round := func(tag string) {
		t.Helper()
		before := commandStats(t, srv)
		for i := range 20 {
			for n := range 6 {
				r, err := check(s, tag+":"+strconv.Itoa(i), lim, 1)
				if err != nil {
					t.Fatalf("%s: %v", tag, err)
				}
				if want := n < 5; r.Allowed != want {
					t.Fatalf("%s: check %d: allowed %v, want %v", tag, n, r.Allowed, want)
				}
			}
		}
		after := commandStats(t, srv)
		if calls := after["fcall"] - before["fcall"]; calls < 120 || after["evalsha"] != before["evalsha"] || after["eval"] != before["eval"] {
			t.Errorf("%s: %d FCALL, %d EVALSHA, %d EVAL for 120 checks; want FCALL only", tag, calls, after["evalsha"]-before["evalsha"], after["eval"]-before["eval"])
		}
	}
	round("first")
	if list := do(t, srv, "FUNCTION", "LIST", "LIBRARYNAME", ev.fn); !strings.Contains(list, ev.fn) {
		t.Fatalf("FUNCTION LIST has no %s:\n%s", ev.fn, list)
	}
	do(t, srv, "FUNCTION", "FLUSH")
	round("after flush")
	srv.Restart(t)
	testredis.WaitFor(t, 30*time.Second, func() string {
		if _, err := check(s, "back", lim, 1); err != nil {
			return err.Error()
		}
		return ""
	})
	round("after restart")
}

// A Redis without functions, or a user whose ACL refuses them, makes the
// Store run EVALSHA from then on, and its checks go on.
func TestFunctionsRefused(t *testing.T) {
	renamed := testredis.Start(t, "--rename-command", "FCALL", "")
	acl := testredis.Start(t)
	do(t, acl, "ACL", "SETUSER", "nofn", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function")
	aclClient := newClientAs(t, acl.Addr, "nofn", "pw")
	for _, tc := range []struct {
		name string
		srv  *testredis.Server
		s    func() (*Store, error)
	}{
		{"no FCALL", renamed, func() (*Store, error) { return New(newClient(t, renamed.Addr), WithFunctions(true)) }},
		{"ACL", acl, func() (*Store, error) { return New(aclClient, WithFunctions(true)) }},
	} {
		s, err := tc.s()
		if err != nil {
			t.Fatal(err)
		}
		ev := s.ev.(*rueidisEval)
		lim := ratewarden.PerHour(3)
		for n := range 5 {
			r, err := check(s, "k", lim, 1)
			if err != nil {
				t.Fatalf("%s: check %d: %v", tc.name, n, err)
			}
			if want := n < 3; r.Allowed != want {
				t.Fatalf("%s: check %d: allowed %v, want %v", tc.name, n, r.Allowed, want)
			}
		}
		if !ev.noFn.Load() {
			t.Errorf("%s: the Store still tries FCALL", tc.name)
		}
		if m := commandStats(t, tc.srv); m["evalsha"]+m["eval"] < 5 {
			t.Errorf("%s: %d EVALSHA and %d EVAL for 5 checks", tc.name, m["evalsha"], m["eval"])
		}
	}
}

// The function library decides as internal/algo does, bit for bit, on
// the test clock: the differential sequences through FCALL.
func TestDifferentialFunctions(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	inner := newRueidisEval(c, testClockLua+checkBody, withFunctions)
	if inner.fn == "" {
		t.Fatal("the test-clock check script has no function")
	}
	s, ev := clockStore(t, inner)
	before := commandStats(t, srv)
	for seed := range sequences(200) {
		runDifferential(t, c, s, ev, 20000+seed, 40)
	}
	if m := commandStats(t, srv); m["fcall"]-before["fcall"] < 200 || m["evalsha"] != before["evalsha"] {
		t.Errorf("%d FCALL and %d EVALSHA for the sequences; want FCALL only", m["fcall"]-before["fcall"], m["evalsha"]-before["evalsha"])
	}
}

// newClientAs returns a rueidis client for addr logged in as user.
func newClientAs(tb testing.TB, addr, user, password string) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Username: user, Password: password, DisableCache: true})
	if err != nil {
		tb.Fatalf("rueidis.NewClient(%s as %s): %v", addr, user, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// A function library keeps its decoded limits and heads and its reply
// table from one call to the next: past the memos' bounds every limit and
// cost still decides as itself, and a call with fewer results than the
// one before gets only its own. On the test clock, stopped an hour or
// more ahead, so that no window of these limits ends during the test and
// no key expires, however slow the machine.
func TestFunctionsMemos(t *testing.T) {
	srv := testredis.Start(t)
	inner := newRueidisEval(newClient(t, srv.Addr), testClockLua+checkBody, withFunctions)
	if inner.fn == "" {
		t.Fatal("the test-clock check script has no function")
	}
	s, ev := clockStore(t, inner)
	ev.now = time.Now().Add(2 * time.Hour).Truncate(time.Hour).Add(30 * time.Minute).UnixMicro()
	before := commandStats(t, srv)
	algos := []ratewarden.Algorithm{ratewarden.SlidingWindow, ratewarden.FixedWindow, ratewarden.TokenBucket}
	for round := range 2 {
		for i := range 600 {
			lim := ratewarden.Limit{Algorithm: algos[i%3], Rate: int64(10 + i), Period: time.Hour}
			r, err := check(s, "memo:"+strconv.Itoa(i), lim, 1)
			if err != nil {
				t.Fatalf("limit %v: %v", lim, err)
			}
			if want := lim.Rate - 1 - int64(round); !r.Allowed || r.Remaining != want {
				t.Fatalf("round %d, limit %v: allowed %v, remaining %d; want admitted, %d", round, lim, r.Allowed, r.Remaining, want)
			}
		}
	}
	big := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1 << 30, Period: time.Hour}
	left := big.Rate
	for cost := int64(1); cost <= 600; cost++ {
		r, err := check(s, "costs", big, cost)
		if err != nil {
			t.Fatalf("cost %d: %v", cost, err)
		}
		left -= cost
		if !r.Allowed || r.Remaining != left {
			t.Fatalf("cost %d: allowed %v, remaining %d; want admitted, %d", cost, r.Allowed, r.Remaining, left)
		}
	}
	three := []ratewarden.Limit{ratewarden.PerMinute(5), ratewarden.PerHour(7), {Algorithm: ratewarden.TokenBucket, Rate: 9, Period: time.Hour}}
	res := make([]ratewarden.Result, 3)
	for i := range 3 {
		if err := s.Check(bg, &ratewarden.Request{Key: "three", Limits: three, Cost: 1}, res); err != nil {
			t.Fatal(err)
		}
		// The reply table held 13 integers; this one has 5 (Check
		// refuses a reply of another length).
		r, err := check(s, "one", ratewarden.PerMinute(5), 1)
		if err != nil || !r.Allowed || r.Remaining != int64(4-i) {
			t.Fatalf("after three limits, check %d: %+v, %v; want admitted, %d left", i, r, err, 4-i)
		}
	}
	if res[0].Remaining != 2 || res[1].Remaining != 4 || res[2].Remaining != 6 {
		t.Errorf("three limits after 3 checks: remaining %d, %d, %d; want 2, 4, 6", res[0].Remaining, res[1].Remaining, res[2].Remaining)
	}
	if m := commandStats(t, srv); m["fcall"]-before["fcall"] < 1806 || m["evalsha"] != before["evalsha"] {
		t.Errorf("%d FCALL and %d EVALSHA for 1806 checks; want FCALL only", m["fcall"]-before["fcall"], m["evalsha"]-before["evalsha"])
	}
}
