package redisstore

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// TestStateIsCompact: the windows and the bucket keep a small integer,
// which Redis stores as an integer (OBJECT ENCODING int), not a string.
func TestStateIsCompact(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	res := make([]ratewarden.Result, 1)
	for _, tc := range []struct {
		lim  ratewarden.Limit
		want func(string) bool
	}{
		{ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Minute}, func(v string) bool { return v == "3" }},
		{ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 100, Period: time.Hour}, func(v string) bool {
			n, err := strconv.ParseInt(v, 10, 64)
			return err == nil && n < 10_000 && n%100 == 3 // prev*100 + curr: a previous window's count may come along
		}},
		{ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: time.Minute}, func(v string) bool {
			n, err := strconv.ParseInt(v, 10, 64)
			return err == nil && n >= 0 && n < 1000 // 600 ms per token: no fraction
		}},
	} {
		for range 3 {
			if err := s.Check(bg, &ratewarden.Request{Key: "c", Limits: []ratewarden.Limit{tc.lim}, Cost: 1}, res); err != nil || !res[0].Allowed {
				t.Fatalf("%v: %+v, %v", tc.lim, res[0], err)
			}
		}
		k := s.Key("c", tc.lim)
		if v := do(t, srv, "GET", k); !tc.want(v) {
			t.Errorf("%s = %q after 3 checks", k, v)
		}
		if enc := do(t, srv, "OBJECT", "ENCODING", k); enc != "int" {
			t.Errorf("%s: OBJECT ENCODING %s, want int", k, enc)
		}
		if at := do(t, srv, "PEXPIRETIME", k); at == "-1" || at == "-2" {
			t.Errorf("%s: PEXPIRETIME %s", k, at)
		}
	}
}

// TestSlidingWindowForms: a sliding window packs its counts as
// prev*100+curr while both are below 100, as 10^4+prev*10^8+curr while
// both are below 9*10^7, and writes "curr prev" from there; every form
// reads back to the same decisions.
func TestSlidingWindowForms(t *testing.T) {
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	s, ev := newClockStore(t, c)
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Minute}
	P := time.Minute.Microseconds()
	ws := (time.Now().Add(time.Hour).UnixMicro()/P + 1) * P
	res := make([]ratewarden.Result, 1)
	k := s.Key("w", lim)
	// The window start comes back from the expiry: two periods after it.
	check := func(at, cost int64, want string, expire int64) {
		t.Helper()
		ev.now = at
		if _, err := s.check(bg, &ratewarden.Request{Key: "w", Limits: []ratewarden.Limit{lim}, Cost: cost}, res); err != nil || !res[0].Allowed {
			t.Fatalf("cost %d at %d: %+v, %v", cost, at, res[0], err)
		}
		if v := do(t, srv, "GET", k); v != want {
			t.Fatalf("after cost %d: %s = %q, want %q", cost, k, v, want)
		}
		if got := do(t, srv, "PEXPIRETIME", k); got != strconv.FormatInt(expire/1000, 10) {
			t.Fatalf("after cost %d: PEXPIRETIME %s, want %d", cost, got, expire/1000)
		}
	}
	check(ws+1, 99, "99", ws+2*P)
	check(ws+2, 1, "10100", ws+2*P) // curr 100
	check(ws+P+1, 7, "10000010007", ws+3*P)
	check(ws+2*P+1, 2, "702", ws+4*P)
	check(ws+3*P+1, 89_999_999, "290009999", ws+5*P)
	check(ws+3*P+2, 1, "90000000 2", ws+5*P)
	check(ws+4*P+1, 7, "7 90000000", ws+6*P)
	check(ws+5*P+1, 2, "702", ws+7*P)
	// The weighted previous count still counts after the round trip.
	ev.now = ws + 5*P + P/2
	if _, err := s.check(bg, &ratewarden.Request{Key: "w", Limits: []ratewarden.Limit{lim}, Peek: true}, res); err != nil {
		t.Fatal(err)
	}
	if want := int64(ratewarden.MaxRate - 2 - 4); res[0].Remaining != want { // ceil(7 × ½) = 4
		t.Fatalf("remaining %d, want %d", res[0].Remaining, want)
	}
}

// TestMalformedState: a value of none of the forms and a compact value
// without an expiry fail their own check with ErrKeyState and are left as
// they are.
func TestMalformedState(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	res := make([]ratewarden.Result, 1)
	limits := []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Minute},
		{Algorithm: ratewarden.SlidingWindow, Rate: 10, Period: time.Minute},
		{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Minute},
	}
	for _, lim := range limits {
		for _, bad := range []struct {
			v      string
			expire bool
		}{{"12", false}, {"1 2 3 4", true}, {"x", true}, {"-1", true}, {"1  2", true}, {"1 x", true}} {
			k := s.Key("bad", lim)
			if bad.expire {
				do(t, srv, "SET", k, bad.v, "PX", "60000")
			} else {
				do(t, srv, "SET", k, bad.v)
			}
			err := s.Check(bg, &ratewarden.Request{Key: "bad", Limits: []ratewarden.Limit{lim}, Cost: 1}, res)
			if !errors.Is(err, ratewarden.ErrKeyState) {
				t.Errorf("%v, state %q (expiry %v): %v, want ErrKeyState", lim, bad.v, bad.expire, err)
			}
			if v := do(t, srv, "GET", k); v != bad.v {
				t.Errorf("%v: the failed check changed %q to %q", lim, bad.v, v)
			}
		}
	}
}

// TestFormat1KeysUntouched: a format 1 key (a replica of an older version)
// and a format 2 key of the same caller key and limit are two keys; a check
// of this version neither reads nor writes the old one.
func TestFormat1KeysUntouched(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Minute}
	old := "rw:{user:1}:fixed_window:1m"
	do(t, srv, "SET", old, "1764640000000000 10 0", "PX", "60000")
	res := make([]ratewarden.Result, 1)
	if err := s.Check(bg, &ratewarden.Request{Key: "user:1", Limits: []ratewarden.Limit{lim}, Cost: 1}, res); err != nil || !res[0].Allowed || res[0].Remaining != 9 {
		t.Fatalf("check beside a format 1 key: %+v, %v; want a fresh count", res[0], err)
	}
	if v := do(t, srv, "GET", old); v != "1764640000000000 10 0" {
		t.Fatalf("format 1 key changed to %q", v)
	}
	if v := do(t, srv, "GET", s.Key("user:1", lim)); v != "1" {
		t.Fatalf("format 2 key = %q, want 1", v)
	}
}

// longEval runs the long-form scripts (as on Redis 6.2) on a 7 server,
// with the production clock, for the check, lease and charge scripts.
type longEval struct {
	*rueidisEval
	tb testing.TB
}

func (e *longEval) rescript(body string) evaluator {
	return newRueidisEval(e.c, clockLua+longForms(e.tb, body), evalshaOnly)
}

// TestFormsMeetThroughChargeAndLease: state written in the long forms
// (Redis 6.2) and in the compact forms is one count to the check, charge
// and lease scripts of this version, whichever wrote it last.
func TestFormsMeetThroughChargeAndLease(t *testing.T) {
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	long, err := storeOn(&longEval{rueidisEval: newRueidisEval(c, clockLua+longForms(t, checkBody), evalshaOnly), tb: t})
	if err != nil {
		t.Fatal(err)
	}
	compact := openStore(t, srv.Addr)
	res := make([]ratewarden.Result, 1)
	check := func(s *Store, lim ratewarden.Limit, cost, want int64) {
		t.Helper()
		if err := s.Check(bg, &ratewarden.Request{Key: "m", Limits: []ratewarden.Limit{lim}, Cost: cost, Peek: cost == 0}, res); err != nil || res[0].Remaining != want {
			t.Fatalf("%v cost %d: %+v, %v; want remaining %d", lim, cost, res[0], err, want)
		}
	}
	charge := func(s *Store, lim ratewarden.Limit, n int64) {
		t.Helper()
		if err := s.Charge(bg, "m", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: n}}, nil); err != nil {
			t.Fatalf("%v charge %d: %v", lim, n, err)
		}
	}
	for _, lim := range []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Hour},
		{Algorithm: ratewarden.SlidingWindow, Rate: 10, Period: time.Hour},
		{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Hour},
	} {
		check(long, lim, 1, 9)
		if v := do(t, srv, "GET", long.Key("m", lim)); !strings.Contains(v, " ") {
			t.Fatalf("%v: long-form store wrote %q", lim, v)
		}
		charge(compact, lim, 2)
		if v := do(t, srv, "GET", long.Key("m", lim)); strings.Contains(v, " ") {
			t.Fatalf("%v: compact store wrote %q", lim, v)
		}
		check(long, lim, 1, 6)
		charge(long, lim, 1)
		check(compact, lim, 0, 5)
	}
	fw := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Hour}
	ll, err := NewLender(long)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := NewLender(compact)
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]*Lender{{ll, cl}, {cl, ll}} {
		g, err := pair[0].Take(bg, "m", fw, 1, 3)
		if err != nil || g.Units != 3 {
			t.Fatalf("take: %+v, %v", g, err)
		}
		ttl := do(t, srv, "PEXPIRETIME", compact.Key("m", fw))
		if n, err := pair[1].GiveBack(bg, "m", fw, g.Window, 2); err != nil || n != 2 {
			t.Fatalf("give back: %d, %v", n, err)
		}
		if got := do(t, srv, "PEXPIRETIME", compact.Key("m", fw)); got != ttl {
			t.Fatalf("give back moved the expiry from %s to %s", ttl, got)
		}
	}
	check(compact, fw, 0, 3) // 5 left, then 2 kept by the two leases
}
