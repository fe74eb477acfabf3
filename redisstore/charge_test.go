package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// Charge counts units where a check at now - Ago would have, and drops
// what no longer matters, for every algorithm, on a fixed clock.
func TestCharge(t *testing.T) {
	srv := testredis.Start(t)
	s, ev := newClockStore(t, newClient(t, srv.Addr))
	const P = int64(60_000_000) // 1m in µs
	// 30s into a minute to come: expiries are real instants, so the
	// clock runs ahead of Redis', not behind.
	rt := redisTime(t, srv)
	t0 := rt - rt%P + P + 30_000_000
	fw := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Minute}
	sw := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 100, Period: time.Minute}
	tb := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Minute}
	sl := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 10, Period: time.Minute}
	remaining := func(key string, lim ratewarden.Limit) int64 {
		t.Helper()
		res := make([]ratewarden.Result, 1)
		if err := s.Check(bg, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{lim}, Peek: true}, res); err != nil {
			t.Fatal(err)
		}
		return res[0].Remaining
	}
	for _, tc := range []struct {
		name  string
		lim   ratewarden.Limit
		spent []ratewarden.Spent
		want  int64 // Remaining after the charge, at t0
	}{
		{"fixed window, this window", fw, []ratewarden.Spent{{Units: 4, Ago: 20 * time.Second}, {Units: 3, Ago: 0}}, 3},
		{"fixed window, the last window is dropped", fw, []ratewarden.Spent{{Units: 4, Ago: 40 * time.Second}, {Units: 3, Ago: 0}}, 7},
		{"fixed window, past the limit", fw, []ratewarden.Spent{{Units: 8}, {Units: 8}}, 0},
		// 60 units in the previous window weigh 30 at half the window.
		{"sliding window, the previous window weighs", sw, []ratewarden.Spent{{Units: 60, Ago: 40 * time.Second}, {Units: 10}}, 60},
		{"sliding window, two windows ago is dropped", sw, []ratewarden.Spent{{Units: 60, Ago: 100 * time.Second}}, 100},
		// 6 units of a 10/min bucket 30s ago: 5 have refilled since.
		{"token bucket, refilled in part", tb, []ratewarden.Spent{{Units: 6, Ago: 30 * time.Second}}, 9},
		{"token bucket, refilled wholly", tb, []ratewarden.Spent{{Units: 3, Ago: 30 * time.Second}}, 10},
		{"token bucket, now", tb, []ratewarden.Spent{{Units: 4}}, 6},
		{"sliding log, in the window", sl, []ratewarden.Spent{{Units: 3, Ago: 50 * time.Second}, {Units: 2, Ago: 10 * time.Second}}, 5},
		{"sliding log, out of the window", sl, []ratewarden.Spent{{Units: 3, Ago: 61 * time.Second}}, 10},
	} {
		key := "charge:" + tc.name
		ev.now = t0
		if err := s.Charge(bg, key, []ratewarden.Limit{tc.lim}, tc.spent, nil); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := remaining(key, tc.lim); got != tc.want {
			t.Errorf("%s: Remaining %d after the charge, want %d", tc.name, got, tc.want)
		}
		if pttl := do(t, srv, "PTTL", s.Key(key, tc.lim)); tc.want < tc.lim.Capacity() && (pttl == "-1" || pttl == "-2") {
			t.Errorf("%s: PTTL %s after a charge that counted", tc.name, pttl)
		}
	}
	// The log's charged units leave the window at their own instants.
	ev.now = t0 + 15_000_000
	if got := remaining("charge:sliding log, in the window", sl); got != 8 {
		t.Errorf("sliding log 15s later: Remaining %d, want 8 (the units charged 50s before left)", got)
	}
	// Multi-limit charges count in every limit.
	ev.now = t0
	if err := s.Charge(bg, "multi", []ratewarden.Limit{fw, sl}, []ratewarden.Spent{{Units: 2}}, nil); err != nil {
		t.Fatal(err)
	}
	if a, b := remaining("multi", fw), remaining("multi", sl); a != 8 || b != 8 {
		t.Errorf("multi-limit charge: Remaining %d and %d, want 8 and 8", a, b)
	}
}

func TestChargeBadInput(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	lim := ratewarden.PerMinute(10)
	for name, tc := range map[string]struct {
		key    string
		limits []ratewarden.Limit
		spent  []ratewarden.Spent
		want   error
	}{
		"empty key":     {"", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: 1}}, ratewarden.ErrInvalidKey},
		"no limits":     {"k", nil, []ratewarden.Spent{{Units: 1}}, ratewarden.ErrInvalidLimit},
		"zero units":    {"k", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: 0}}, ratewarden.ErrInvalidCost},
		"negative ago":  {"k", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: 1, Ago: -time.Second}}, ratewarden.ErrInvalidCost},
		"invalid limit": {"k", []ratewarden.Limit{{Rate: 0, Period: time.Second}}, []ratewarden.Spent{{Units: 1}}, ratewarden.ErrInvalidLimit},
	} {
		if err := s.Charge(bg, tc.key, tc.limits, tc.spent, nil); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if n := do(t, srv, "DBSIZE"); n != "0" {
		t.Errorf("bad charges left %s keys", n)
	}
	do(t, srv, "SET", s.Key("wrong", lim), "x")
	if err := s.Charge(bg, "wrong", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: 1}}, nil); !errors.Is(err, ratewarden.ErrKeyState) {
		t.Errorf("charge of a malformed key: %v, want ErrKeyState", err)
	}
}
