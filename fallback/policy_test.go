package fallback

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/storetest"
)

func TestPolicyText(t *testing.T) {
	for _, p := range []Policy{FailOpen, FailClosed, LocalFallback} {
		b, err := p.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var q Policy
		if err := q.UnmarshalText(b); err != nil || q != p {
			t.Fatalf("round trip of %v: %v, %v", p, q, err)
		}
	}
	var cfg struct{ OnFailure Policy }
	if err := json.Unmarshal([]byte(`{"OnFailure":"fail_closed"}`), &cfg); err != nil || cfg.OnFailure != FailClosed {
		t.Fatalf("JSON: %v, %v", cfg.OnFailure, err)
	}
	for _, bad := range []string{"", "open", "FAIL_OPEN", "fail_open "} {
		_, err := ParsePolicy(bad)
		if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "fallback: unknown policy") {
			t.Errorf("ParsePolicy(%q): err = %v", bad, err)
		}
	}
	if _, err := Policy(0).MarshalText(); !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Errorf("MarshalText of the zero Policy: err = %v", err)
	}
	if s := Policy(7).String(); s != "Policy(7)" {
		t.Errorf("Policy(7).String() = %q", s)
	}
	for st, want := range map[State]string{StateClosed: "closed", StateHalfOpen: "half_open", StateOpen: "open", 5: "State(5)"} {
		if st.String() != want {
			t.Errorf("State(%d).String() = %q, want %q", st, st.String(), want)
		}
	}
}

// Acceptance 8: bad configuration is a clear error at construction.
func TestBadConfig(t *testing.T) {
	m, _ := memstore.New()
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithTimeout(-time.Second), "fallback: timeout must be > 0, got -1s"},
		{WithTimeout(0), "fallback: timeout must be > 0, got 0s"},
		{WithReplicas(0), "fallback: replicas must be >= 1, got 0"},
		{WithPolicy(0), "fallback: policy must be fail_open, fail_closed or local_fallback, got Policy(0)"},
		{WithPolicy(9), "got Policy(9)"},
		{WithRetryAfter(-1), "fallback: retry after must be >= 0"},
		{WithProbeInterval(0), "fallback: probe interval must be > 0"},
		{WithHalfOpenProbes(0), "fallback: half-open probes must be between 1"},
		{WithTripAfter(0), "fallback: trip after must be between 1"},
		{WithTripRatio(0, 10), "fallback: trip ratio must be in (0, 1], got 0"},
		{WithTripRatio(1.5, 10), "got 1.5"},
		{WithTripRatio(0.5, 0), "fallback: trip ratio minimum requests must be between 1"},
		{WithWindow(time.Millisecond), "fallback: window must be >= 10ms, got 1ms"},
		{WithLogger(nil), "fallback: logger must not be nil"},
		{WithLocalStore(nil), "fallback: local store must not be nil"},
		{nil, "fallback: option 0 is nil"},
	} {
		_, err := New(m, tc.opt)
		if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want one containing %q and wrapping ErrInvalidConfig", err, tc.want)
		}
	}
	// New validates what the options collected: of two, the last counts.
	if _, err := New(m, WithTimeout(0), WithTimeout(time.Second)); err != nil {
		t.Errorf("an invalid timeout replaced by a valid one: %v", err)
	}
	if _, err := New(m, WithTimeout(time.Second), WithReplicas(2), WithTimeout(0)); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("a valid timeout replaced by an invalid one: err = %v, want one naming the timeout", err)
	}
	if _, err := New(m, WithLocalStore(nil), WithLocalStore(m)); err != nil {
		t.Errorf("a nil local store replaced by a real one: %v", err)
	}
	if _, err := New(nil); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "primary store must not be nil") {
		t.Errorf("New(nil): err = %v", err)
	}
	// Config files name a policy by text: an unknown one fails there.
	var p Policy
	if err := p.UnmarshalText([]byte("fail_sideways")); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), `"fail_sideways"`) {
		t.Errorf("unknown policy in config: err = %v", err)
	}
}

func TestShare(t *testing.T) {
	tb := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 30}
	for _, tc := range []struct {
		l        ratewarden.Limit
		replicas int64
		want     ratewarden.Limit
	}{
		// A share keeps the limit's algorithm.
		{ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 100, Period: time.Minute}, 4, ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 25, Period: time.Minute}},
		{ratewarden.PerMinute(103), 4, ratewarden.PerMinute(25)}, // rounded down
		{ratewarden.PerMinute(3), 4, ratewarden.PerMinute(1)},    // at least 1
		{ratewarden.PerMinute(100), 1, ratewarden.PerMinute(100)},
		{tb, 4, ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 2, Period: time.Second, Burst: 7}},
		{tb, 100, ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Second, Burst: 1}},
		// Rate rounds up to 1 while Burst keeps 3: the refill time would be
		// 549 days, so the share's Burst is capped at MaxPeriod's worth.
		{ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1999, Period: 183 * 24 * time.Hour, Burst: 3998}, 1000,
			ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: 183 * 24 * time.Hour, Burst: 2}},
	} {
		got := share(tc.l, tc.replicas)
		if got != tc.want {
			t.Errorf("share(%v, %d) = %v, want %v", tc.l, tc.replicas, got, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("share(%v, %d) is invalid: %v", tc.l, tc.replicas, err)
		}
	}
}

// Every valid limit has a valid share, for any number of replicas.
func TestShareIsValid(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for range 20000 {
		l := ratewarden.Limit{
			Algorithm: ratewarden.Algorithm(r.IntN(4)),
			Rate:      1 + r.Int64N(1_000_000),
			Period:    time.Duration(1+r.Int64N(int64(ratewarden.MaxPeriod/time.Millisecond))) * time.Millisecond,
		}
		if l.Algorithm == ratewarden.TokenBucket && r.IntN(2) == 0 {
			l.Burst = 1 + r.Int64N(10*l.Rate)
		}
		if l.Algorithm == ratewarden.SlidingLog {
			l.Rate = 1 + l.Rate%ratewarden.MaxLogRate
		}
		if l.Validate() != nil {
			continue
		}
		n := 1 + r.Int64N(5000)
		if err := share(l, n).Validate(); err != nil {
			t.Fatalf("share(%v, %d) = %v: %v", l, n, share(l, n), err)
		}
	}
}

// LocalFallback enforces the share on the local store, reports the share
// as the Limit checked, and denies (without consuming) a cost larger than
// the whole share.
func TestLocalFallbackShare(t *testing.T) {
	f := newFaulty(t)
	f.set(failing)
	var rec recorder
	s := newStore(t, f, append(rec.options(), WithReplicas(4))...)
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 10, Period: time.Hour} // share 2
	for i := range 3 {
		r := mustCheck(t, s, "k", lim, 1)
		if r.Allowed != (i < 2) || r.Source != ratewarden.SourceLocalFallback || r.Limit.Rate != 2 {
			t.Fatalf("check %d: %+v, want allowed only twice by a local share of 2", i, r)
		}
		if !r.Allowed && r.RetryAfter <= 0 {
			t.Fatalf("local denial without RetryAfter: %+v", r)
		}
	}
	if n := rec.Degraded(LocalFallback); n != 3 {
		t.Fatalf("OnDegraded(local_fallback) called %d times, want 3", n)
	}
	// Cost 5 fits the limit (10) but not the share (2): denied, nothing consumed.
	r := mustCheck(t, s, "other", lim, 5)
	if r.Allowed || r.RetryAfter != time.Hour || r.Remaining != 2 {
		t.Fatalf("cost above the share: %+v, want denied with RetryAfter 1h and 2 remaining", r)
	}
	if r := mustCheck(t, s, "other", lim, 2); !r.Allowed {
		t.Fatalf("after a too-big request the share is untouched, got %+v", r)
	}
}

// WithPolicyFunc answers each limit by its own policy, all or nothing: a
// FailClosed limit denies the request and nothing is taken from the local
// share.
func TestPolicyFunc(t *testing.T) {
	f := newFaulty(t)
	f.set(failing)
	login := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: time.Hour}
	general := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 3, Period: time.Hour}
	open := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 3, Period: time.Hour}
	s := newStore(t, f, WithLogger(discard), WithPolicy(LocalFallback), WithPolicyFunc(func(l ratewarden.Limit) Policy {
		switch l {
		case login:
			return FailClosed
		case open:
			return FailOpen
		}
		return 0 // the default
	}))
	res := make([]ratewarden.Result, 3)
	req := &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{login, general, open}, Cost: 1}
	if err := s.Check(context.Background(), req, res); err != nil {
		t.Fatal(err)
	}
	want := []ratewarden.Source{ratewarden.SourceFailClosed, ratewarden.SourceLocalFallback, ratewarden.SourceFailOpen}
	for i, r := range res {
		if r.Source != want[i] || r.Allowed != (i > 0) {
			t.Fatalf("res[%d] = %+v, want source %v, allowed %v", i, r, want[i], i > 0)
		}
	}
	if res[1].Remaining != 3 || res[2].Remaining != 2 {
		t.Fatalf("remaining: local %d (want 3: peeked), fail_open %d (want 2)", res[1].Remaining, res[2].Remaining)
	}
	// Without the FailClosed limit the local share is consumed.
	req.Limits = []ratewarden.Limit{general, open}
	for i := range 4 {
		if err := s.Check(context.Background(), req, res[:2]); err != nil {
			t.Fatal(err)
		}
		if res[0].Allowed != (i < 3) || !res[1].Allowed {
			t.Fatalf("check %d: %+v, want the local share of 3 to bind", i, res[:2])
		}
	}
}

// A healthy fallback Store is its primary: the conformance suite passes
// through it, every result from the store.
//
// It runs on real time, as the suite does against Redis: storetest.Run
// starts subtests, which a synctest bubble does not allow, and a fake clock
// of our own would be the hand-written kind synctest replaces. The deadline
// is generous so that no call to the healthy primary is degraded on a busy
// machine.
func TestConformanceThroughFallback(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Subject {
		m, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		st := newStore(t, m, WithLogger(discard), WithTimeout(healthyTimeout))
		return storetest.Subject{Store: sourceChecked{t, st}, Advance: time.Sleep}
	})
}

// sourceChecked fails the test when a result is not the store's own.
type sourceChecked struct {
	t *testing.T
	*Store
}

func (s sourceChecked) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	err := s.Store.Check(ctx, req, res)
	for _, r := range res {
		if err == nil && r.Source != ratewarden.SourceStore {
			s.t.Errorf("healthy primary, but a result came from %v", r.Source)
		}
	}
	return err
}

// A key longer than the local store's key cap (memstore's 1 KiB default)
// still gets its local share during an outage, of its own: the share
// stores long keys by their hash, and Reset clears the same entry.
func TestLocalFallbackLongKeys(t *testing.T) {
	f := newFaulty(t, memstore.WithMaxKeyBytes(64<<10)) // the primary takes long keys
	f.set(failing)
	s := newStore(t, f, WithPolicy(LocalFallback), WithReplicas(4))
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 8, Period: time.Hour} // share 2
	long := strings.Repeat("k", 10_000)
	for _, key := range []string{long + "a", long + "b"} {
		for i := range 3 {
			r := mustCheck(t, s, key, lim, 1)
			if r.Allowed != (i < 2) || r.Source != ratewarden.SourceLocalFallback {
				t.Fatalf("key %d…: check %d: %+v, want allowed only twice by its own local share of 2", len(key), i, r)
			}
		}
	}
	// The primary is down, so Reset reports that; the local share is
	// cleared all the same (and a long key is no input error).
	if err := s.Reset(context.Background(), long+"a", lim); !errors.Is(err, ratewarden.ErrStoreUnavailable) || errors.Is(err, ratewarden.ErrInvalidKey) {
		t.Fatalf("Reset of a long key with the primary down: %v, want only the primary's unavailability", err)
	}
	if r := mustCheck(t, s, long+"a", lim, 1); !r.Allowed {
		t.Fatalf("after Reset the long key's share is full again, got %+v", r)
	}
	if r := mustCheck(t, s, long+"b", lim, 1); r.Allowed {
		t.Fatalf("Reset of one long key cleared another's share: %+v", r)
	}
}
