package ratewarden_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
)

// callLog records the store calls that reach the store it wraps, as
// "peek key" or "check key", and can fail or interfere with them.
type callLog struct {
	ratewarden.Store
	mu    sync.Mutex
	calls []string
	// before, when set, runs before each call (outside the lock) and may
	// return an error to fail it.
	before func(req *ratewarden.Request) error
}

func (s *callLog) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	op := "check"
	if req.Peek {
		op = "peek"
	}
	s.mu.Lock()
	s.calls = append(s.calls, op+" "+req.Key)
	s.mu.Unlock()
	if s.before != nil {
		if err := s.before(req); err != nil {
			return err
		}
	}
	return s.Store.Check(ctx, req, res)
}

func (s *callLog) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.calls, ", ")
}

// newLogged returns a Limiter on a logged memstore, with opts.
func newLogged(t *testing.T, opts ...ratewarden.Option) (*ratewarden.Limiter, *callLog) {
	t.Helper()
	cl := &callLog{Store: mustMem(t)}
	l, err := ratewarden.New(cl, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, cl
}

// hourly is an exact limit that does not move within a test.
func hourly(n int64) ratewarden.Limit {
	return ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: n, Period: time.Hour}
}

// remaining peeks key under limit (through the Limiter, not logged when l
// is not the logged one) and returns what is left.
func remaining(t *testing.T, l *ratewarden.Limiter, key string, limit ratewarden.Limit) int64 {
	t.Helper()
	r, err := l.AllowN(context.Background(), key, limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}

func allowedOf(d ratewarden.KeysDecision) string {
	var b strings.Builder
	fmt.Fprint(&b, d.Allowed, ":")
	for _, c := range d.Checks {
		fmt.Fprint(&b, " ", c.Allowed)
	}
	return b.String()
}

func TestAllowKeysBadInputCallsNoStore(t *testing.T) {
	ctx := context.Background()
	good := hourly(5)
	var zero ratewarden.Limiter
	tests := []struct {
		name   string
		checks []ratewarden.KeyCheck
		want   error
		msg    string
	}{
		{"no checks", nil, ratewarden.ErrInvalidKey, "no checks given"},
		{"empty key", []ratewarden.KeyCheck{{Key: "a", Limits: []ratewarden.Limit{good}, Cost: 1}, {Limits: []ratewarden.Limit{good}, Cost: 1}}, ratewarden.ErrInvalidKey, "checks[1]: key must not be empty"},
		{"no limits", []ratewarden.KeyCheck{{Key: "a", Cost: 1}}, ratewarden.ErrInvalidLimit, "checks[0]: no limits given"},
		{"bad limit", []ratewarden.KeyCheck{{Key: "a", Limits: []ratewarden.Limit{good}}, {Key: "b", Limits: []ratewarden.Limit{{Rate: 1}}}}, ratewarden.ErrInvalidLimit, "checks[1]: period must be > 0"},
		{"same scope", []ratewarden.KeyCheck{{Key: "a", Limits: []ratewarden.Limit{good, hourly(9)}}}, ratewarden.ErrInvalidLimit, "checks[0]: limits[0] (5/1h sliding_log) and limits[1] (9/1h sliding_log) share the scope"},
		{"cost over capacity", []ratewarden.KeyCheck{{Key: "a", Limits: []ratewarden.Limit{good}, Cost: 6}}, ratewarden.ErrInvalidCost, "checks[0]: cost 6 exceeds the capacity 5"},
		{"negative cost", []ratewarden.KeyCheck{{Key: "a", Limits: []ratewarden.Limit{good}, Cost: 1}, {Key: "a", Limits: []ratewarden.Limit{good}, Cost: -1, Shadow: true}}, ratewarden.ErrInvalidCost, "checks[1]: cost must be >= 0"},
		{"Via not from New", []ratewarden.KeyCheck{{Key: "a", Limits: []ratewarden.Limit{good}, Via: &zero}}, ratewarden.ErrInvalidConfig, "checks[0]: Via"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var observed atomic.Int64
			l, cl := newLogged(t, ratewarden.WithObserver(func(string, []ratewarden.Result, error) { observed.Add(1) }))
			for _, call := range []func(context.Context, ...ratewarden.KeyCheck) (ratewarden.KeysDecision, error){l.AllowKeys, l.PeekKeys} {
				d, err := call(ctx, tc.checks...)
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) || d.Checks != nil {
					t.Fatalf("= %+v, %v; want %v mentioning %q", d, err, tc.want, tc.msg)
				}
				if ratewarden.Classify(ctx, err) != ratewarden.InvalidInput {
					t.Errorf("Classify(%v) = %v, want invalid_input", err, ratewarden.Classify(ctx, err))
				}
			}
			if got := cl.log(); got != "" || observed.Load() != 0 {
				t.Fatalf("store calls %q, observer calls %d; want none", got, observed.Load())
			}
		})
	}
}

func TestAllowKeysOneCheckIsOneStoreCall(t *testing.T) {
	ctx := context.Background()
	l, cl := newLogged(t)
	lim := hourly(2)
	for _, want := range []string{"true: true", "true: true", "false: false"} {
		d, err := l.AllowKeys(ctx, ratewarden.KeyCheck{Key: "k", Limits: []ratewarden.Limit{lim}, Cost: 1})
		if err != nil || allowedOf(d) != want {
			t.Fatalf("AllowKeys = %s, %v; want %s", allowedOf(d), err, want)
		}
	}
	if got := cl.log(); got != "check k, check k, check k" {
		t.Fatalf("store calls: %s; want one check per decision", got)
	}
}

func TestAllowKeysAllOrNothing(t *testing.T) {
	ctx := context.Background()
	l, cl := newLogged(t)
	a, b := hourly(3), hourly(1)
	checks := []ratewarden.KeyCheck{
		{Key: "client", Limits: []ratewarden.Limit{a}, Cost: 1},
		{Key: "route", Limits: []ratewarden.Limit{b}, Cost: 1},
	}
	d, err := l.AllowKeys(ctx, checks...)
	if err != nil || allowedOf(d) != "true: true true" {
		t.Fatalf("first = %s, %v", allowedOf(d), err)
	}
	if d.Checks[0].Results[0].Remaining != 2 || d.Checks[1].Results[0].Remaining != 0 {
		t.Fatalf("first consumed %+v, want remaining 2 and 0", d.Checks)
	}
	if got := cl.log(); got != "peek client, peek route, check client, check route" {
		t.Fatalf("store calls: %s; want both peeked, then both consumed", got)
	}
	cl.calls = nil
	d, err = l.AllowKeys(ctx, checks...)
	if err != nil || allowedOf(d) != "false: true false" {
		t.Fatalf("second = %s, %v; want denied by the route", allowedOf(d), err)
	}
	if got := cl.log(); got != "peek client, peek route" {
		t.Fatalf("store calls of a denied decision: %s; want the peeks only", got)
	}
	if d.Checks[0].Results[0].Remaining != 2 || remaining(t, l, "client", a) != 2 {
		t.Fatalf("the client's check consumed on a denied decision: %+v", d.Checks[0])
	}
	if r := d.Checks[1].Results[0]; r.RetryAfter <= 0 || r.Limit != b {
		t.Fatalf("the denying check reports %+v, want its RetryAfter", r)
	}
}

func TestAllowKeysShadow(t *testing.T) {
	ctx := context.Background()
	l, cl := newLogged(t)
	enforced, shadow := hourly(2), hourly(1)
	checks := []ratewarden.KeyCheck{
		{Key: "e", Limits: []ratewarden.Limit{enforced}, Cost: 1},
		{Key: "s", Limits: []ratewarden.Limit{shadow}, Cost: 1, Shadow: true},
	}
	// Both admit: the shadow check is consumed too.
	d, err := l.AllowKeys(ctx, checks...)
	if err != nil || allowedOf(d) != "true: true true" || remaining(t, l, "s", shadow) != 0 {
		t.Fatalf("first = %s, %v", allowedOf(d), err)
	}
	// The shadow check denies: reported, not denying the whole.
	d, err = l.AllowKeys(ctx, checks...)
	if err != nil || allowedOf(d) != "true: true false" || remaining(t, l, "e", enforced) != 0 {
		t.Fatalf("second = %s, %v; want allowed with the shadow check denied", allowedOf(d), err)
	}
	// The enforced check denies: the shadow check is not consumed.
	if err := l.Reset(ctx, "s", shadow); err != nil {
		t.Fatal(err)
	}
	d, err = l.AllowKeys(ctx, checks...)
	if err != nil || allowedOf(d) != "false: false true" || remaining(t, l, "s", shadow) != 1 {
		t.Fatalf("third = %s, %v; want denied, the shadow check untouched", allowedOf(d), err)
	}
	// Only shadow checks: consumed directly, never denied.
	cl.calls = nil
	only := []ratewarden.KeyCheck{checks[1], {Key: "s2", Limits: []ratewarden.Limit{shadow}, Cost: 1, Shadow: true}}
	for _, want := range []string{"true: true true", "true: false false"} {
		d, err = l.AllowKeys(ctx, only...)
		if err != nil || allowedOf(d) != want {
			t.Fatalf("shadow only = %s, %v; want %s", allowedOf(d), err, want)
		}
	}
	if got := cl.log(); got != "check s, check s2, check s, check s2" {
		t.Fatalf("store calls of shadow-only decisions: %s; want no peeks", got)
	}
}

func TestPeekKeysConsumesNothing(t *testing.T) {
	ctx := context.Background()
	l, cl := newLogged(t)
	lim := hourly(1)
	checks := []ratewarden.KeyCheck{{Key: "a", Limits: []ratewarden.Limit{lim}, Cost: 1}}
	for range 3 {
		d, err := l.PeekKeys(ctx, checks...)
		if err != nil || allowedOf(d) != "true: true" || d.Checks[0].Results[0].Remaining != 1 {
			t.Fatalf("PeekKeys = %+v, %v", d, err)
		}
	}
	if got := cl.log(); got != "peek a, peek a, peek a" {
		t.Fatalf("store calls: %s", got)
	}
}

// TestAllowKeysVia: a check with Via is decided on that Limiter's store
// and told to that Limiter's observer, the others on the receiver's.
func TestAllowKeysVia(t *testing.T) {
	ctx := context.Background()
	var mainSeen, otherSeen []string
	main, mainLog := newLogged(t, ratewarden.WithObserver(func(key string, res []ratewarden.Result, err error) {
		mainSeen = append(mainSeen, fmt.Sprint(key, " ", res[0].Allowed, " ", err))
	}))
	other, otherLog := newLogged(t, ratewarden.WithObserver(func(key string, res []ratewarden.Result, err error) {
		otherSeen = append(otherSeen, fmt.Sprint(key, " ", res[0].Allowed, " ", err))
	}))
	lim := hourly(1)
	checks := []ratewarden.KeyCheck{
		{Key: "a", Limits: []ratewarden.Limit{lim}, Cost: 1},
		{Key: "b", Limits: []ratewarden.Limit{lim}, Cost: 1, Via: other},
	}
	for range 2 {
		if _, err := main.AllowKeys(ctx, checks...); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := mainLog.log(), "peek a, check a, peek a"; got != want {
		t.Errorf("receiver's store calls: %s, want %s", got, want)
	}
	if got, want := otherLog.log(), "peek b, check b, peek b"; got != want {
		t.Errorf("Via's store calls: %s, want %s", got, want)
	}
	if got, want := strings.Join(mainSeen, "; "), "a true <nil>; a false <nil>"; got != want {
		t.Errorf("receiver's observer: %s, want %s", got, want)
	}
	if got, want := strings.Join(otherSeen, "; "), "b true <nil>; b false <nil>"; got != want {
		t.Errorf("Via's observer: %s, want %s (once per decision, with the reported results)", got, want)
	}
}

var errBoom = fmt.Errorf("test: connection reset: %w", ratewarden.ErrStoreUnavailable)

// TestAllowKeysStoreErrors: a store error stops the decision and is
// returned; a peek that fails consumes nothing, a consume that fails
// leaves the checks before it consumed, and observers hear of both.
func TestAllowKeysStoreErrors(t *testing.T) {
	ctx := context.Background()
	lim := hourly(5)
	type seen struct {
		key string
		err error
	}
	var got []seen
	obs := ratewarden.WithObserver(func(key string, _ []ratewarden.Result, err error) { got = append(got, seen{key, err}) })
	l, cl := newLogged(t, obs)
	checks := []ratewarden.KeyCheck{
		{Key: "a", Limits: []ratewarden.Limit{lim}, Cost: 1},
		{Key: "b", Limits: []ratewarden.Limit{lim}, Cost: 1},
	}

	cl.before = func(req *ratewarden.Request) error {
		if req.Key == "b" {
			return errBoom
		}
		return nil
	}
	d, err := l.AllowKeys(ctx, checks...)
	if !errors.Is(err, errBoom) || d.Checks != nil || ratewarden.Classify(ctx, err) != ratewarden.StoreUnavailable {
		t.Fatalf("peek failure: %+v, %v", d, err)
	}
	if len(got) != 1 || got[0].key != "b" || !errors.Is(got[0].err, errBoom) {
		t.Fatalf("observer after a failed peek: %+v, want b's error only", got)
	}
	cl.before = nil
	if remaining(t, l, "a", lim) != 5 {
		t.Fatal("a failed peek consumed")
	}

	got = nil
	cl.before = func(req *ratewarden.Request) error {
		if req.Key == "b" && !req.Peek {
			return errBoom
		}
		return nil
	}
	if _, err := l.AllowKeys(ctx, checks...); !errors.Is(err, errBoom) {
		t.Fatalf("consume failure: %v", err)
	}
	if len(got) != 2 || got[0] != (seen{"a", nil}) || got[1].key != "b" || !errors.Is(got[1].err, errBoom) {
		t.Fatalf("observer after a failed consume: %+v, want a's results and b's error", got)
	}
	cl.before = nil
	if remaining(t, l, "a", lim) != 4 {
		t.Fatal("the check consumed before the failure should stay consumed (best effort across keys)")
	}
}

// TestAllowKeysRaceAfterPeek: a request that takes a key's last unit
// between the peek and the consume denies the decision there; the checks
// before stay consumed, the ones after are not consumed.
func TestAllowKeysRaceAfterPeek(t *testing.T) {
	ctx := context.Background()
	l, cl := newLogged(t)
	lim := hourly(1)
	checks := []ratewarden.KeyCheck{
		{Key: "a", Limits: []ratewarden.Limit{lim}, Cost: 1},
		{Key: "b", Limits: []ratewarden.Limit{lim}, Cost: 1},
		{Key: "c", Limits: []ratewarden.Limit{lim}, Cost: 1},
	}
	other, err := ratewarden.New(cl.Store) // another replica, on the same state
	if err != nil {
		t.Fatal(err)
	}
	cl.before = func(req *ratewarden.Request) error {
		if req.Key == "b" && !req.Peek {
			if _, err := other.Allow(ctx, "b", lim); err != nil {
				return err
			}
		}
		return nil
	}
	d, err := l.AllowKeys(ctx, checks...)
	if err != nil || allowedOf(d) != "false: true false true" {
		t.Fatalf("AllowKeys = %s, %v; want denied at b, c reporting its peek", allowedOf(d), err)
	}
	cl.before = nil
	if a, c := remaining(t, l, "a", lim), remaining(t, l, "c", lim); a != 0 || c != 1 {
		t.Fatalf("remaining a=%d c=%d; want a consumed, c not", a, c)
	}
}

// TestAllowKeysSameKeyTwice: checks may name one key; each is decided on
// its own, in order.
func TestAllowKeysSameKeyTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l, _ := newLogged(t)
		perMin := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: time.Minute}
		perHour := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Hour}
		d, err := l.AllowKeys(ctx,
			ratewarden.KeyCheck{Key: "k", Limits: []ratewarden.Limit{perMin}, Cost: 2},
			ratewarden.KeyCheck{Key: "k", Limits: []ratewarden.Limit{perHour}, Cost: 5})
		if err != nil || allowedOf(d) != "true: true true" || d.Checks[0].Results[0].Remaining != 1 || d.Checks[1].Results[0].Remaining != 5 {
			t.Fatalf("AllowKeys = %+v, %v", d, err)
		}
		time.Sleep(90 * time.Second) // the next minute, the same hour
		d, err = l.AllowKeys(ctx,
			ratewarden.KeyCheck{Key: "k", Limits: []ratewarden.Limit{perMin}, Cost: 3},
			ratewarden.KeyCheck{Key: "k", Limits: []ratewarden.Limit{perHour}, Cost: 6})
		if err != nil || allowedOf(d) != "false: true false" {
			t.Fatalf("AllowKeys = %s, %v; want denied by the hour", allowedOf(d), err)
		}
		if r := d.Checks[1].Results[0]; r.RetryAfter != 58*time.Minute+30*time.Second {
			t.Fatalf("RetryAfter %v, want the end of the hour", r.RetryAfter)
		}
	})
}

func TestClassify(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var none context.Context
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want ratewarden.ErrorKind
	}{
		{live, nil, ratewarden.NoError},
		{done, nil, ratewarden.NoError},
		{live, fmt.Errorf("x: %w", ratewarden.ErrInvalidKey), ratewarden.InvalidInput},
		{live, ratewarden.ErrInvalidLimit, ratewarden.InvalidInput},
		{done, ratewarden.ErrInvalidCost, ratewarden.InvalidInput},
		{live, ratewarden.ErrInvalidConfig, ratewarden.InvalidInput},
		{live, errBoom, ratewarden.StoreUnavailable},
		{live, errors.New("a backend following no convention"), ratewarden.StoreUnavailable},
		{live, context.Canceled, ratewarden.StoreUnavailable}, // the store's own context, not the caller's
		{done, errBoom, ratewarden.CallerCanceled},
		{done, context.Canceled, ratewarden.CallerCanceled},
		{none, errBoom, ratewarden.StoreUnavailable},
		{live, fmt.Errorf("redisstore: x: %w", ratewarden.ErrKeyState), ratewarden.KeyState},
		{done, ratewarden.ErrKeyState, ratewarden.KeyState}, // the answer came, whatever ctx did since
	} {
		if got := ratewarden.Classify(tc.ctx, tc.err); got != tc.want {
			t.Errorf("Classify(ctx done=%v, %v) = %v, want %v", tc.ctx != nil && tc.ctx.Err() != nil, tc.err, got, tc.want)
		}
	}
	for k, want := range map[ratewarden.ErrorKind]string{ratewarden.NoError: "none", ratewarden.InvalidInput: "invalid_input",
		ratewarden.CallerCanceled: "caller_canceled", ratewarden.StoreUnavailable: "store_unavailable", ratewarden.KeyState: "key_state", 9: "unknown"} {
		if k.String() != want {
			t.Errorf("ErrorKind(%d).String() = %q, want %q", k, k.String(), want)
		}
	}
}

// TestAllowKeysRedisExactPerKey: replicas (Limiters with clients of their
// own) deciding many two-key requests at once on a real Redis admit
// exactly the limit of the scarce key, and the other key is consumed by
// exactly the admitted requests: nothing by a denied one, even one denied
// by a race after its peek.
func TestAllowKeysRedisExactPerKey(t *testing.T) {
	srv := testredis.Start(t)
	const (
		replicas   = 3
		goroutines = 8
		perG       = 25 // 600 requests in all
		scarce     = 40
		plenty     = 1000
	)
	scarceLim, plentyLim := hourly(scarce), hourly(plenty)
	limiters := make([]*ratewarden.Limiter, replicas)
	for i := range limiters {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		st, err := redisstore.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if limiters[i], err = ratewarden.New(st); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var admitted, shadowSeen atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, replicas*goroutines)
	for r := range replicas {
		for range goroutines {
			wg.Go(func() {
				for range perG {
					d, err := limiters[r].AllowKeys(ctx,
						ratewarden.KeyCheck{Key: "scarce", Limits: []ratewarden.Limit{scarceLim}, Cost: 1},
						ratewarden.KeyCheck{Key: "plenty", Limits: []ratewarden.Limit{plentyLim}, Cost: 1},
						ratewarden.KeyCheck{Key: "watched", Limits: []ratewarden.Limit{hourly(1)}, Cost: 1, Shadow: true})
					if err != nil {
						errs <- err
						return
					}
					if d.Allowed {
						admitted.Add(1)
						if !d.Checks[0].Allowed || !d.Checks[1].Allowed {
							errs <- fmt.Errorf("allowed with a denied check: %+v", d)
							return
						}
					}
					if d.Checks[2].Allowed {
						shadowSeen.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := admitted.Load(); got != scarce {
		t.Errorf("admitted %d requests, want exactly %d", got, scarce)
	}
	if got := remaining(t, limiters[0], "plenty", plentyLim); got != plenty-scarce {
		t.Errorf("plenty has %d left, want %d: consumed by exactly the admitted requests", got, plenty-scarce)
	}
	if got := remaining(t, limiters[0], "watched", hourly(1)); got != 0 || shadowSeen.Load() < 1 {
		t.Errorf("shadow check: %d left, admitted %d times; want consumed once", got, shadowSeen.Load())
	}
}
